"""What a node changes on its host, recorded before it starts and put back when it stops.

The kubelet sets a few sysctls on start (it has no warn-only mode), the bridge plugin turns on
IP forwarding, kube-proxy and our egress rule add iptables rules, the kubelet and containerd
create a few fixed paths and cgroups, and the node has its own bridge. The record is a file, so
a node stopped from another process (or after a crash) is restored all the same; it is written
once, so a second start after a crash keeps the values from before the first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel

# What the kubelet (vm.*, kernel.*), the bridge plugin (forwarding) and kube-proxy (conntrack,
# route_localnet) may set.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
# Paths the kubelet and containerd use whatever they are configured with.
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/netns",
    "/run/containerd",
    "/var/lib/cni",
)
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle", "raw")
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBELET_CGROUP = "kubepods"


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _table_rules(command: str, table: str) -> str:
    saved = subprocess.run(
        [f"{command}-save", "-t", table], capture_output=True, text=True, check=False
    ).stdout
    return comparable_rules(saved)


def comparable_rules(saved: str) -> str:
    """A table as iptables-save prints it, less comments and packet counters; "" for a table
    with no rule, no chain of its own and every policy ACCEPT (as good as none)."""
    lines = [
        line.split(" [", 1)[0] if line.startswith(":") else line
        for line in saved.splitlines()
        if not line.startswith("#")
    ]
    chains = [line for line in lines if line.startswith(":")]
    if not any(line.startswith("-A") for line in lines) and all(
        line.endswith(" ACCEPT") for line in chains
    ):
        return ""
    return "".join(line + "\n" for line in lines)


class HostRecord(BaseModel):
    """The host as it was before the node started."""

    sysctls: dict[str, str]
    iptables: dict[str, dict[str, str]]  # command → table → rules
    absent_paths: list[str]
    entries: dict[str, list[str]]  # fixed path that existed → its entries then
    absent_cgroups: list[str]
    bridge: str


def _read_host(bridge: str) -> HostRecord:
    fixed = [Path(p) for p in FIXED_PATHS]
    return HostRecord(
        sysctls={
            name: _sysctl_path(name).read_text().strip()
            for name in SYSCTLS
            if _sysctl_path(name).exists()
        },
        iptables={
            command: {table: _table_rules(command, table) for table in TABLES}
            for command in IPTABLES
            if shutil.which(command)
        },
        absent_paths=[str(p) for p in fixed if not p.exists()],
        entries={str(p): sorted(e.name for e in p.iterdir()) for p in fixed if p.is_dir()},
        absent_cgroups=[
            str(c / KUBELET_CGROUP)
            for c in sorted(CGROUP_ROOT.iterdir())
            if c.is_dir() and not (c / KUBELET_CGROUP).exists()
        ],
        bridge=bridge,
    )


def record(path: Path, bridge: str) -> HostRecord:
    """Record the host's state in `path`, unless a record from an unrestored start is there."""
    if path.exists():
        return HostRecord.model_validate_json(path.read_text())
    state = _read_host(bridge)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(state.model_dump_json(indent=2))
    return state


def unmount_below(directory: Path) -> None:
    """Unmount whatever is mounted at or below `directory`, deepest first (a pod's volumes,
    container root filesystems, network namespaces)."""
    prefix = str(directory.resolve())
    mounts = [
        line.split()[1].replace("\\040", " ")
        for line in Path("/proc/self/mounts").read_text().splitlines()
    ]
    for mount in sorted(
        {m for m in mounts if m == prefix or m.startswith(prefix + "/")}, reverse=True
    ):
        subprocess.run(["umount", "--lazy", mount], capture_output=True, check=False)


def _restore_iptables(before: dict[str, dict[str, str]]) -> None:
    for command, tables in before.items():
        for table, rules in tables.items():
            if _table_rules(command, table) == rules:
                continue
            if rules.strip():
                subprocess.run([f"{command}-restore"], input=rules, text=True, check=True)
            else:  # the table was empty: flush it and drop its chains (policies stay ACCEPT)
                subprocess.run([command, "-t", table, "-F"], check=False)
                subprocess.run([command, "-t", table, "-X"], check=False)


def _remove_path(path: Path) -> None:
    unmount_below(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_cgroup(cgroup: Path, timeout: float = 10.0) -> None:
    """A cgroup and its children, deepest first (rmdir of an empty cgroup; no rm -r there).
    Processes still in it are the node's containers, orphaned when a node was killed with its
    shims: they are killed first, and a cgroup is busy until they have exited."""
    if not cgroup.is_dir():
        return
    children = sorted((p for p in cgroup.rglob("*") if p.is_dir()), reverse=True)
    for directory in [*children, cgroup]:
        deadline = time.monotonic() + timeout
        while True:
            for pid in (directory / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                os.rmdir(directory)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def restore(path: Path) -> list[str]:
    """Put the host back as `path` recorded it, then forget the record. Returns what could not
    be restored (empty when all went back)."""
    if not path.exists():
        return []
    before = HostRecord.model_validate_json(path.read_text())
    problems: list[str] = []
    subprocess.run(["ip", "link", "delete", before.bridge], capture_output=True, check=False)
    _restore_iptables(before.iptables)
    for name, value in before.sysctls.items():
        _sysctl_path(name).write_text(value)
    for directory, entries in before.entries.items():
        for entry in Path(directory).iterdir():
            if entry.name not in entries:
                _remove_path(entry)
    for absent in before.absent_paths:
        _remove_path(Path(absent))
    for cgroup in before.absent_cgroups:
        try:
            _remove_cgroup(Path(cgroup))
        except OSError as error:
            problems.append(f"cgroup {cgroup}: {error}")
    after = _read_host(before.bridge)
    problems += [
        f"sysctl {name} is {after.sysctls.get(name)}, was {value}"
        for name, value in before.sysctls.items()
        if after.sysctls.get(name) != value
    ]
    problems += [
        f"{command} table {table} differs from before"
        for command, tables in before.iptables.items()
        for table, rules in tables.items()
        if after.iptables[command][table] != rules
    ]
    path.unlink()
    return problems
