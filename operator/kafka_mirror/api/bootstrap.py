"""Bootstrap servers by a strict grammar, and the installer's host patterns matched against the
host a client will connect to.

Kafka clients read a bootstrap entry more loosely than a split at the last `:` does:
librdkafka drops a `proto://` prefix and what follows a `/`, and resolvers read `127.1`,
`0x7f.1` or `010.0.0.1` as IPv4 addresses. So an entry is accepted only as a DNS name (its
last label starting with a letter, so no resolver reads it as a number), a dotted-decimal IPv4
address (no leading zeros) or a bracketed IPv6 address, then `:port`, and nothing else. Every
client finds the same host in such an entry, and the allow-list is matched against that host:
`*` stands for characters within one DNS label, never for a `.`, `:` or `/`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_LAST_LABEL = r"[A-Za-z]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
DNS_NAME = rf"({_LABEL}\.)*{_LAST_LABEL}\.?"
IPV4 = rf"{_OCTET}(\.{_OCTET}){{3}}"
IPV6 = r"\[[0-9A-Fa-f:.]{2,45}\]"  # its digits checked by ipaddress (no zone, no brackets inside)
ENTRY = rf"({DNS_NAME}|{IPV4}|{IPV6}):{_PORT}"
# The CRD's and the model's pattern for `bootstrapServers`: entries separated by commas only.
BOOTSTRAP_SERVERS = rf"^{ENTRY}(,{ENTRY})*$"

Host = str | ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class BrokerAddress:
    """One bootstrap entry as the clients read it: a lower-case DNS name without its trailing
    dot, or an IP address; and a port."""

    host: Host
    port: int


def parse_entry(entry: str) -> BrokerAddress:
    """One `host:port` of the grammar above; ValueError for anything else."""
    if re.fullmatch(ENTRY, entry) is None:
        raise ValueError(f"{entry!r} is not host:port (a DNS name, an IPv4 or a [IPv6] address)")
    host, port = entry.rsplit(":", 1)
    if len(host) > 253:
        raise ValueError(f"{entry!r}: a host name has at most 253 characters")
    if host.startswith("["):
        address = ipaddress.IPv6Address(host[1:-1])
        # The clients reach an IPv4-mapped address over IPv4: it is matched as that address.
        return BrokerAddress(address.ipv4_mapped or address, int(port))
    if re.fullmatch(IPV4, host):
        return BrokerAddress(ipaddress.IPv4Address(host), int(port))
    return BrokerAddress(host.lower().removesuffix("."), int(port))


def parse_bootstrap(servers: str) -> list[BrokerAddress]:
    return [parse_entry(entry) for entry in servers.split(",")]


@dataclass(frozen=True)
class HostPattern:
    """One allow-list pattern: a DNS name pattern, an IP address or an IP network, and
    optionally one port."""

    text: str
    name: re.Pattern[str] | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
    port: int | None = None

    def allows(self, address: BrokerAddress) -> bool:
        if self.port is not None and address.port != self.port:
            return False
        if isinstance(address.host, str):
            return self.name is not None and self.name.fullmatch(address.host) is not None
        return self.network is not None and address.host in self.network


def _name_pattern(text: str) -> re.Pattern[str]:
    """`*` matches characters of one label; a first label `*` matches one or more labels."""
    labels = text.lower().removesuffix(".").split(".")
    if not all(re.fullmatch(r"[a-z0-9_*-]+", label) for label in labels):
        raise ValueError("labels of letters, digits, `-`, `_` and `*`")
    if all(re.fullmatch(r"[0-9*]+", label) for label in labels):
        raise ValueError("IP addresses are allowed by networks, as in 10.0.0.0/16")
    within = "[a-z0-9_-]*"
    parts = [within.join(re.escape(piece) for piece in label.split("*")) for label in labels]
    if labels[0] == "*" and len(labels) > 1:
        parts[0] = r"[a-z0-9_-]+(\.[a-z0-9_-]+)*"
    return re.compile(r"\.".join(parts))


def parse_host_pattern(text: str) -> HostPattern:
    """An installer's pattern: `name`, `name:port` (`*.kafka.svc.cluster.local`,
    `broker.example.com:9093`), an IP address (`10.0.0.7`, `10.0.0.7:9092`, `[fd00::7]:9092`,
    `fd00::7`) or a network (`10.0.0.0/24`, `fd00::/64`). ValueError, saying why, otherwise."""
    try:
        if "/" in text:
            return HostPattern(text, network=ipaddress.ip_network(text))
        host, port = text, None
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            if rest and not rest.startswith(":"):
                raise ValueError("`]` is followed by `:port` or nothing")
            port = _port(rest[1:]) if rest else None
        elif text.count(":") == 1:
            host, port_text = text.split(":")
            port = _port(port_text)
        if ":" in host or re.fullmatch(r"[0-9.]+", host):
            return HostPattern(text, network=ipaddress.ip_network(host), port=port)
        return HostPattern(text, name=_name_pattern(host), port=port)
    except ValueError as error:
        raise ValueError(
            f"bootstrap host pattern {text!r} cannot be used ({error}): write a DNS name in "
            "which `*` stands for characters of one label (a first label `*` for any "
            "subdomain), an IP address or an IP network, each optionally with :port"
        ) from None


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"port {text!r} is not 1 to 65535")
    return int(text)


@lru_cache(maxsize=64)
def host_patterns(texts: tuple[str, ...]) -> tuple[HostPattern, ...]:
    return tuple(parse_host_pattern(text) for text in texts)
