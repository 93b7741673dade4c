"""What a KafkaMirror may point at, as whoever installs the operator allows it.

The operator holds more than the people who write KafkaMirror objects: it starts pods with the
Secrets a mirror names and connects to the clusters it names. So the values that decide where
those credentials go are bounded by allow-lists from the operator's flags (the chart's
`allowed.*` values), with safe defaults:

- worker and audit images: the operator's own worker and audit images (those it renders when
  `spec.worker.image` and `spec.audit.image` are unset), and images matching
  `--allowed-worker-image` patterns;
- Spark masters: local mode inside the audit pod (`local`, `local[N]`, `local[*]`), and the
  masters listed with `--allowed-spark-master`;
- bootstrap hosts: any, unless `--allowed-bootstrap-host` patterns are given; then the host
  of every `host:port` of both clusters, as the clients read it (`kafka_mirror.api.bootstrap`),
  must match one, checked before the operator connects; so must the `host:port` of each
  schema registry URL (`spec.schemaRegistry`), where the registries' credentials go;
- SASL PLAIN only over TLS (it sends the password as it is), and a schema registry given
  credentials only at an `https://` URL (basic authentication sends them as they are), unless
  `--allow-plain-without-tls`;
- the worker pods' annotation keys, toleration keys and node selectors (`key=value`): none but
  those matching `--allowed-pod-annotation`, `--allowed-toleration-key` and
  `--allowed-node-selector` patterns (an annotation can take the pod out of a mesh or put it on
  another network, a toleration and a selector can place it on the control plane's nodes);
- ACL grants the spec steers: renamed principals (`aclSync.principals`) and the applications'
  rights moved by an operation (`aclSync.moveApplications`) let the spec's author choose who
  gets rights on the target, and on its topics the mirror does not write: refused unless
  `--allow-spec-acl-grants`;
- credential Secrets: only those labelled `kafkamirror.io/credential: "true"` (checked by the
  controller, which reads them), unless `--allow-unlabelled-secrets`; one annotated
  `kafkamirror.io/bootstrap-hosts` only towards the hosts its patterns match.

A spec outside them is reported, naming the field, the value and the flag that would allow it;
the operator renders and connects nothing for it. Pure functions: the controller decides what
to do with the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kafka_mirror.api.bootstrap import host_patterns, parse_entry
from kafka_mirror.api.models import KafkaMirrorSpec

# The label a Secret carries to let mirrors use it (unless the installer allows any Secret).
CREDENTIAL_LABEL = "kafkamirror.io/credential"
# An annotation on such a Secret: the bootstrap-host patterns it may be sent to (comma-separated,
# the allow-list's syntax), beyond the installer's list, which still applies.
HOSTS_ANNOTATION = "kafkamirror.io/bootstrap-hosts"

# Spark's local mode, in the audit pod itself: no cluster to send the job (and the credentials
# in its options) to. N is bounded so a typo cannot ask for a million threads.
LOCAL_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})\])?")


def glob(pattern: str) -> re.Pattern[str]:
    """A pattern where `*` matches any run of characters (`.`, `/` and `:` too) and every other
    character only itself: image references hold `[`, `?` and `.`, which shell-style globs and
    regular expressions would read as syntax."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


@dataclass(frozen=True)
class AllowLists:
    """The installer's allow-lists (operator flags), beyond the defaults above."""

    worker_images: tuple[str, ...] = ()
    spark_masters: tuple[str, ...] = ()
    bootstrap_hosts: tuple[str, ...] = ()  # empty: any host
    plain_without_tls: bool = False
    pod_annotations: tuple[str, ...] = ()  # patterns of keys
    toleration_keys: tuple[str, ...] = ()  # patterns; `*` allows a toleration with no key
    node_selectors: tuple[str, ...] = ()  # patterns of `key=value`
    unlabelled_secrets: bool = False  # Secrets without CREDENTIAL_LABEL too
    spec_acl_grants: bool = False  # aclSync.principals and aclSync.moveApplications

    def __post_init__(self) -> None:
        host_patterns(self.bootstrap_hosts)  # ValueError, naming the pattern, if one is unusable


@dataclass(frozen=True)
class NotAllowed:
    """One value of a spec outside the allow-lists, and how to get it allowed."""

    field: str
    value: str
    allowed: str  # what is allowed now, in words
    flag: str
    chart_value: str

    @property
    def message(self) -> str:
        return (
            f"{self.field} {self.value!r} is not allowed (allowed: {self.allowed}): change "
            f"{self.field}, or have the operator's installer allow it with {self.flag} (chart "
            f"value {self.chart_value})"
        )


def matches(value: str, patterns: tuple[str, ...]) -> bool:
    return any(glob(p).fullmatch(value) for p in patterns)


def image_allowed(image: str, allowed: AllowLists, own_images: tuple[str, ...]) -> bool:
    return image in own_images or matches(image, allowed.worker_images)


def master_allowed(master: str, allowed: AllowLists) -> bool:
    return LOCAL_MASTER.fullmatch(master) is not None or master in allowed.spark_masters


def bootstrap_allowed(entry: str, allowed: AllowLists) -> bool:
    """Whether one `host:port` may be contacted: it is an entry of the strict grammar and its
    host (and port) matches a pattern."""
    if not allowed.bootstrap_hosts:
        return True
    try:
        address = parse_entry(entry)
    except ValueError:
        return False  # the model refuses it too; never contacted
    return any(p.allows(address) for p in host_patterns(allowed.bootstrap_hosts))


def not_allowed(
    spec: KafkaMirrorSpec, allowed: AllowLists, own_images: tuple[str, ...]
) -> list[NotAllowed]:
    """Every value of `spec` outside the allow-lists; empty when the spec may be used.
    `own_images`: the operator's worker and audit images, those it renders by default."""
    refused: list[NotAllowed] = []
    for field, image in (
        ("spec.worker.image", spec.worker.image),
        ("spec.audit.image", spec.audit.image),
    ):
        if image is not None and not image_allowed(image, allowed, own_images):
            refused.append(
                NotAllowed(
                    field,
                    image,
                    ", ".join(
                        (
                            f"the operator's images {' and '.join(own_images)}",
                            *allowed.worker_images,
                        )
                    ),
                    "--allowed-worker-image",
                    "allowed.workerImages",
                )
            )
    master = spec.audit.spark.master
    if not master_allowed(master, allowed):
        refused.append(
            NotAllowed(
                "spec.audit.spark.master",
                master,
                ", ".join(("local", "local[N]", "local[*]", *allowed.spark_masters)),
                "--allowed-spark-master",
                "allowed.sparkMasters",
            )
        )
    for role, cluster in (("source", spec.source), ("target", spec.target)):
        if (
            cluster.sasl is not None
            and cluster.sasl.mechanism == "PLAIN"
            and not cluster.tls.enabled
            and not allowed.plain_without_tls
        ):
            refused.append(
                NotAllowed(
                    f"spec.{role}.sasl.mechanism",
                    "PLAIN",
                    f"PLAIN with spec.{role}.tls.enabled, SCRAM-SHA-256, SCRAM-SHA-512",
                    "--allow-plain-without-tls",
                    "allowed.plainWithoutTls",
                )
            )
        refused += [
            _host_refused(f"spec.{role}.bootstrapServers", entry, allowed)
            for entry in cluster.bootstrap_servers.split(",")
            if not bootstrap_allowed(entry, allowed)
        ]
    registry = spec.schema_registry
    for role, endpoint in (
        (("source", registry.source), ("target", registry.target)) if registry else ()
    ):
        secret = endpoint.password_secret is not None or endpoint.username_secret is not None
        if secret and endpoint.url.startswith("http://") and not allowed.plain_without_tls:
            refused.append(
                NotAllowed(
                    f"spec.schemaRegistry.{role}.url",
                    endpoint.url,
                    "https:// URLs for a registry given credentials",
                    "--allow-plain-without-tls",
                    "allowed.plainWithoutTls",
                )
            )
        if not bootstrap_allowed(endpoint.address, allowed):
            refused.append(_host_refused(f"spec.schemaRegistry.{role}.url", endpoint.url, allowed))
    return refused + _acl_grants(spec, allowed) + _pod_placement(spec, allowed)


def _acl_grants(spec: KafkaMirrorSpec, allowed: AllowLists) -> list[NotAllowed]:
    """The ACL sync's settings that let the spec's author choose who gets rights on the target:
    a principal renamed gets what another had, and moved rights land on the target's local
    topics, which the mirror does not write (another team's, on a shared cluster)."""
    if allowed.spec_acl_grants:
        return []
    asked = [
        ("spec.aclSync.principals", f"{len(spec.acl_sync.principals)} renamed principals")
        if spec.acl_sync.principals
        else None,
        ("spec.aclSync.moveApplications", "true") if spec.acl_sync.move_applications else None,
    ]
    return [
        NotAllowed(
            field,
            value,
            "none: the source's principals as they are, no rights moved",
            "--allow-spec-acl-grants",
            "allowed.specAclGrants",
        )
        for field, value in filter(None, asked)
    ]


def _host_refused(field: str, value: str, allowed: AllowLists) -> NotAllowed:
    """A host the credentials would go to, off the installer's list."""
    return NotAllowed(
        field,
        value,
        ", ".join(allowed.bootstrap_hosts),
        "--allowed-bootstrap-host",
        "allowed.bootstrapHosts",
    )


def _pod_placement(spec: KafkaMirrorSpec, allowed: AllowLists) -> list[NotAllowed]:
    """The worker pods' annotations, tolerations and node selectors off the allow-lists."""
    pod = spec.worker
    asked = [
        *(("annotations", key, allowed.pod_annotations) for key in sorted(pod.annotations)),
        *(("tolerations", t.key or "", allowed.toleration_keys) for t in pod.tolerations),
        *(
            ("nodeSelector", f"{key}={value}", allowed.node_selectors)
            for key, value in sorted(pod.node_selector.items())
        ),
    ]
    flags = {
        "annotations": ("--allowed-pod-annotation", "allowed.podAnnotations"),
        "tolerations": ("--allowed-toleration-key", "allowed.tolerationKeys"),
        "nodeSelector": ("--allowed-node-selector", "allowed.nodeSelectors"),
    }
    return [
        NotAllowed(f"spec.worker.{field}", value, ", ".join(patterns) or "none", *flags[field])
        for field, value, patterns in asked
        if not matches(value, patterns)
    ]
