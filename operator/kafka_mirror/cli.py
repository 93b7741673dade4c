"""`kafka-mirror`: the command line of every part of the project."""

from __future__ import annotations

import argparse
import faulthandler
import os
import socket
import sys
import urllib.parse
import uuid
from pathlib import Path

from kafka_mirror.operation_cli import add_operation_commands
from kafka_mirror.render import DEFAULT_AUDIT_IMAGE, DEFAULT_IMAGE, Images


def _crds(args: argparse.Namespace) -> None:
    from kafka_mirror.api.crdgen import write_crds
    from kafka_mirror.api.reference import api_reference

    if args.output:
        for path in write_crds([Path(d) for d in args.output]):
            print(f"wrote {path}")
        return
    repo = Path(args.repo)
    if not (repo / "crds").is_dir():
        sys.exit(f"{repo.resolve()} is not the repository's root: pass --repo or --output")
    for path in write_crds([repo / directory for directory in CRD_DIRS]):
        print(f"wrote {path}")
    (repo / API_REFERENCE).write_text(api_reference())
    print(f"wrote {repo / API_REFERENCE}")


def _development(args: argparse.Namespace) -> None:
    """`dev …` and `demo`: development tooling, not shipped (dev/python, docs/dev-stack.md)."""
    try:
        from kafka_mirror_dev import commands
    except ModuleNotFoundError as missing:
        if missing.name != "kafka_mirror_dev":
            raise
        sys.exit(
            f"kafka-mirror {args.command}: development tooling, not part of the product: run it "
            "from a checkout after `make build` (or `pip install -e dev/python`)"
        )
    commands.run(args)


def _operator(args: argparse.Namespace) -> None:
    import logging

    from kafka_mirror.api.policy import AllowLists
    from kafka_mirror.controller.handlers import OperatorOptions, run
    from kafka_mirror.controller.metrics import OperatorMetrics
    from kafka_mirror.kube import api_client

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's own login reads it too
    metrics = OperatorMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    try:
        allowed = AllowLists(
            worker_images=tuple(args.allowed_worker_image),
            spark_masters=tuple(args.allowed_spark_master),
            bootstrap_hosts=tuple(args.allowed_bootstrap_host),
            plain_without_tls=args.allow_plain_without_tls,
            pod_annotations=tuple(args.allowed_pod_annotation),
            toleration_keys=tuple(args.allowed_toleration_key),
            node_selectors=tuple(args.allowed_node_selector),
            unlabelled_secrets=args.allow_unlabelled_secrets,
            spec_acl_grants=args.allow_spec_acl_grants,
        )
    except ValueError as error:
        raise SystemExit(f"kafka-mirror operator: --allowed-bootstrap-host: {error}") from None
    options = OperatorOptions(
        api=api_client(Path(args.kubeconfig) if args.kubeconfig else None),
        images=Images(args.worker_image, args.audit_image),
        status_interval=args.status_interval,
        metrics=metrics,
        allowed=allowed,
    )
    namespaces = [] if args.all_namespaces else args.namespace
    if not args.leader_election_namespace:
        run(options, namespaces, args.liveness or None)
        return
    from kafka_mirror.controller import leader

    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    health_port = urllib.parse.urlsplit(args.liveness).port if args.liveness else None
    lease = leader.wait_until_leading(
        options.api, args.leader_election_namespace, identity, health_port
    )
    try:
        run(options, namespaces, args.liveness or None)
    finally:
        lease.give_up()


def _audit(args: argparse.Namespace) -> None:
    import logging

    try:
        from kafka_mirror.audit.main import run
    except ImportError:  # the operator and worker image has no PySpark nor Java
        raise SystemExit(
            "the audit needs PySpark, which is not installed here: run it in the audit image "
            f"({DEFAULT_AUDIT_IMAGE.rsplit(':', 1)[0]}), or install kafka-mirror-operator[audit]"
        ) from None

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    conf = dict(item.split("=", 1) for item in args.conf)
    sys.exit(
        run(
            Path(args.config),
            Path(args.report) if args.report else None,
            args.history,
            args.master,
            conf,
            Path(args.kubeconfig) if args.kubeconfig else None,
            update_status=not args.no_status,
            full=args.full,
            full_request=args.full_request,
        )
    )


def _executor(_args: argparse.Namespace) -> None:
    try:
        from kafka_mirror.audit.executor import run
    except ImportError:
        raise SystemExit("a Spark executor needs the audit image (PySpark and Java)") from None
    run()


def _smoke(args: argparse.Namespace) -> None:
    from kafka_mirror import smoke
    from kafka_mirror.kube import api_client

    clusters = smoke.Clusters(args.source_bootstrap, args.target_bootstrap, args.source_alias)
    with api_client(Path(args.kubeconfig) if args.kubeconfig else None) as api:
        ok = smoke.run(api, args.namespace, args.mirror, clusters, sys.stdout, args.timeout)
    sys.exit(0 if ok else 1)


def _worker(args: argparse.Namespace) -> None:
    from kafka_mirror.worker.main import main as worker_main

    worker_main(Path(args.config))


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="kafka-mirror", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    crds = commands.add_parser("crds", help="generate the CRDs and docs/api.md from the API models")
    crds.add_argument(
        "--output",
        action="append",
        help="directory to write the CRDs into (repeatable; default: the repository's crds/, "
        "the Helm chart's and the kustomize base's, and then docs/api.md is rewritten too)",
    )
    crds.add_argument(
        "--repo", default=".", help="the repository's root, without --output (default: here)"
    )
    crds.set_defaults(handler=_crds)

    dev = commands.add_parser("dev", help="the local stack: Kafka A and B, kube-apiserver, Helm")
    dev.add_argument(
        "action",
        choices=["up", "down", "env", "build", "manifests", "node"],
        help="up: start (idempotent) and print exports; env: print exports; down: stop; "
        "build: only install the parts into the cache; manifests: render deploy/base/install.yaml "
        "from the Helm chart; node: run a real single-node cluster (root) in the foreground "
        "until Ctrl-C, and restore the host",
    )
    dev.set_defaults(handler=_development)

    operator = commands.add_parser("operator", help="run the operator (kopf)")
    scope = operator.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    operator.add_argument(
        "--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)"
    )
    operator.add_argument(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        help="run only while holding the Lease kafka-mirror-operator in this namespace, so that "
        "several replicas may run and one acts (default: no leader election: run one replica)",
    )
    operator.add_argument(
        "--status-interval",
        type=float,
        default=10.0,
        help="seconds between status refreshes from Kafka and the Deployments (default 10)",
    )
    operator.add_argument(
        "--worker-image",
        default=os.environ.get("KAFKA_MIRROR_WORKER_IMAGE", DEFAULT_IMAGE),
        help="image of the worker pods when a mirror does not set one "
        "(default: $KAFKA_MIRROR_WORKER_IMAGE, else the operator's own image)",
    )
    operator.add_argument(
        "--audit-image",
        default=os.environ.get("KAFKA_MIRROR_AUDIT_IMAGE", DEFAULT_AUDIT_IMAGE),
        help="image of the audit pods when a mirror does not set one: PySpark, Java and "
        f"Spark's Kafka source (default: $KAFKA_MIRROR_AUDIT_IMAGE, else {DEFAULT_AUDIT_IMAGE})",
    )
    # What a KafkaMirror may point at (kafka_mirror.api.policy): the installer's allow-lists.
    operator.add_argument(
        "--allowed-worker-image",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also allow worker and audit images matching this pattern (`*` matches any "
        "characters; repeatable; default: only --worker-image and --audit-image)",
    )
    operator.add_argument(
        "--allowed-spark-master",
        action="append",
        default=[],
        metavar="URL",
        help="also allow this Spark master for the audit (repeatable; default: only local mode: "
        "local, local[N], local[*])",
    )
    operator.add_argument(
        "--allowed-bootstrap-host",
        action="append",
        default=[],
        metavar="PATTERN",
        help="allow only bootstrap servers whose host (or host:port) matches one of these "
        "patterns: a DNS name where `*` stands for characters of one label (a first label `*` "
        "for any subdomain), an IP address or network (10.0.0.0/16); repeatable; default: any "
        "host",
    )
    for flag, metavar, what in (
        ("--allowed-pod-annotation", "PATTERN", "worker pod annotation keys"),
        ("--allowed-toleration-key", "PATTERN", "worker pod toleration keys (`*`: any key)"),
        ("--allowed-node-selector", "PATTERN", "worker pod node selectors, as key=value"),
    ):
        operator.add_argument(
            flag,
            action="append",
            default=[],
            metavar=metavar,
            help=f"allow {what} matching this pattern (`*` matches any characters; repeatable; "
            "default: none)",
        )
    operator.add_argument(
        "--allow-plain-without-tls",
        action="store_true",
        help="allow SASL PLAIN without TLS, which sends the password as it is (default: refused)",
    )
    operator.add_argument(
        "--allow-unlabelled-secrets",
        action="store_true",
        help="let mirrors use any Secret of their namespace (default: only Secrets labelled "
        "kafkamirror.io/credential=true)",
    )
    operator.add_argument(
        "--allow-spec-acl-grants",
        action="store_true",
        help="let mirrors rename principals for the ACL sync (aclSync.principals) and move the "
        "applications' rights with an operation (aclSync.moveApplications): their authors then "
        "choose who gets rights on the target (default: refused)",
    )
    # Ports default from the environment too: the chart and the plain manifests set them there.
    operator.add_argument(
        "--liveness",
        default=f"http://0.0.0.0:{os.environ.get('KAFKA_MIRROR_HEALTH_PORT', '8080')}/healthz",
        help="liveness endpoint URL ('' to disable; default port: $KAFKA_MIRROR_HEALTH_PORT, "
        "else 8080)",
    )
    operator.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("KAFKA_MIRROR_METRICS_PORT", "9400")),
        help="port of the Prometheus /metrics endpoint (0 to disable; default: "
        "$KAFKA_MIRROR_METRICS_PORT, else 9400)",
    )
    operator.add_argument("--verbose", action="store_true", help="debug logging")
    operator.set_defaults(handler=_operator)

    audit = commands.add_parser(
        "audit", help="audit a mirror with PySpark: completeness, offset syncs, checkpoints"
    )
    audit.add_argument("--config", required=True, help="the mirror's worker configuration file")
    audit.add_argument("--report", help="write the JSON report here (default: standard output)")
    audit.add_argument("--history", help="append the summary to this Parquet dataset")
    audit.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    audit.add_argument(
        "--conf", action="append", default=[], help="extra Spark setting KEY=VALUE (repeatable)"
    )
    audit.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then $KUBECONFIG)")
    audit.add_argument(
        "--no-status", action="store_true", help="do not write the summary into the status"
    )
    audit.add_argument(
        "--full",
        action="store_true",
        help="audit every record again, not only those after the last verified watermark",
    )
    audit.add_argument(
        "--full-request",
        help="audit every record again once per new value (the CronJob passes "
        "spec.audit.fullAuditRequest)",
    )
    audit.set_defaults(handler=_audit)

    executor = commands.add_parser(
        "executor",
        help="a Spark executor of the audit on Spark on Kubernetes: what the executor pods the "
        "audit's driver creates run (settings from Spark in the environment)",
    )
    executor.set_defaults(handler=_executor)

    worker = commands.add_parser("worker", help="mirror topics: the process in each worker pod")
    worker.add_argument("--config", required=True, help="the worker's YAML configuration file")
    worker.set_defaults(handler=_worker)

    smoke = commands.add_parser(
        "smoke",
        help="after installing: produce the sample traffic on A and check it all reaches B "
        "(the example mirror and selection must be applied)",
    )
    smoke.add_argument("--namespace", required=True, help="namespace of the mirror")
    smoke.add_argument("--mirror", default="a-to-b", help="the KafkaMirror (default a-to-b)")
    smoke.add_argument("--source-bootstrap", required=True, help="bootstrap servers of A")
    smoke.add_argument("--target-bootstrap", required=True, help="bootstrap servers of B")
    smoke.add_argument("--source-alias", default="A", help="alias of the source (default A)")
    smoke.add_argument("--timeout", type=float, default=300, help="seconds to wait (default 300)")
    smoke.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then $KUBECONFIG)")
    smoke.set_defaults(handler=_smoke)

    add_operation_commands(commands)

    demo = commands.add_parser("demo", help="the main job on the embedded dev stack")
    demo.set_defaults(handler=_development)
    return root


# The repository's generated files, relative to its root (`kafka-mirror crds --repo`); tests fail
# when they drift from the models.
CRD_DIRS = [
    Path("crds"),
    Path("charts/kafka-mirror-operator/crds"),
    Path("deploy/base/crds"),  # the kustomize base may only use files below it
]
API_REFERENCE = Path("docs/api.md")


def main(argv: list[str] | None = None) -> None:
    # The operator and the audit load librdkafka too: a crash in it prints the Python stacks.
    faulthandler.enable()
    args = parser().parse_args(argv)
    args.handler(args)
