"""The main job on the dev stack's real node: what a newcomer runs first.

Starts a real single-node cluster (node.py) and Kafka A and B on its pods' bridge
address, installs the CRDs, starts the operator (its workers and audit pods of the node's
image), applies the example mirror and selection (pointed at those clusters), produces sample
traffic on A, shows the mirror's status as `kubectl` would once it is Ready with no lag, runs
the audit CronJob's job once, and stops everything, restoring the host. Where no node can run,
it says what it needs and where the same demo runs on kind.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes.client import ApiClient

from kafka_mirror import smoke
from kafka_mirror.api.models import API_VERSION
from kafka_mirror.kube import api_client, apply, install_crds, table
from kafka_mirror.smoke import read_mirror
from kafka_mirror_dev import pods, stack
from kafka_mirror_dev.builds import REPO_ROOT, progress
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import GATEWAY, KubeNode
from kafka_mirror_dev.operator import OperatorProcess
from kafka_mirror_dev.prerequisites import unavailable_reason

NAMESPACE = "kafka-mirror-demo"
MIRROR = "a-to-b"  # the example's name
EXAMPLES = REPO_ROOT / "examples"
ON_KIND = """`make demo` runs the example on a real single-node cluster on this machine:
{reason}. The same demo on kind, where Docker runs and a registry is reachable:
  make kind-e2e   # dev/kind/e2e.sh: the image, Kafka, the chart, the examples, the smoke check
(README.md, "Two commands")."""


def example_objects(kafka_a: str, kafka_b: str, namespace: str) -> list[dict[str, Any]]:
    """The example mirror and selection, in `namespace`, pointed at the given clusters."""
    mirror = yaml.safe_load((EXAMPLES / "kafkamirror-a-to-b.yaml").read_text())
    mirror["spec"]["source"]["bootstrapServers"] = kafka_a
    mirror["spec"]["target"]["bootstrapServers"] = kafka_b
    selection = yaml.safe_load((EXAMPLES / "selection-accounting.yaml").read_text())
    for body in (mirror, selection):
        body["metadata"]["namespace"] = namespace
    return [mirror, selection]


def show_status(api: ApiClient, namespace: str, out: TextIO) -> None:
    for kind, plural in (
        ("KafkaMirror", "kafkamirrors"),
        ("MirrorTopicSelection", "mirrortopicselections"),
    ):
        print(f"\n$ kubectl get {plural} -n {namespace}", file=out)
        print(table(api, API_VERSION, kind, namespace), file=out)
    status = read_mirror(api, namespace, MIRROR).get("status", {})
    shown = {
        "conditions": [
            {k: c[k] for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions", [])
        ],
        **{k: status.get(k) for k in ("activeTopics", "topics", "totalLag", "maxLatencySeconds")},
    }
    command = f"kubectl get kafkamirror a-to-b -n {namespace} -o yaml"
    print(f"\n$ {command}  # status, abridged", file=out)
    print(yaml.safe_dump({"status": shown}, sort_keys=False), file=out)


def run_audit(api: ApiClient, namespace: str, out: TextIO) -> bool:
    """One run of the mirror's audit CronJob, and its summary as the status shows it."""
    print("\nrunning the audit once (CronJob a-to-b-audit, PySpark in local mode)…", file=out)
    passed, log = pods.run_now(api, namespace, "a-to-b-audit")
    audit = read_mirror(api, namespace, MIRROR).get("status", {}).get("lastAudit", {})
    command = f"kubectl get kafkamirror a-to-b -n {namespace} -o jsonpath='{{.status.lastAudit}}'"
    print(f"$ {command}", file=out)
    print(yaml.safe_dump({"lastAudit": audit}, sort_keys=False), file=out)
    if not passed:
        print(f"the audit did not pass; its log:\n{log[-3000:]}", file=out)
    return passed


def run_demo(
    api: ApiClient,
    kubeconfig: Path,
    worker_image: str,
    audit_image: str,
    kafka_a: str,
    kafka_b: str,
    namespace: str,
    workdir: Path,
    out: TextIO,
    timeout: float = 300,
) -> bool:
    """The whole main job against a running cluster whose pods reach the Kafka clusters; True
    when the mirror caught up and its audit passed."""
    install_crds(api)
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    operator = OperatorProcess(
        kubeconfig,
        namespace,
        workdir,
        status_interval=3,
        extra_args=("--worker-image", worker_image, "--audit-image", audit_image),
    ).start()
    print(f"operator running (log: {operator.log_path})", file=out)
    try:
        for body in example_objects(kafka_a, kafka_b, namespace):
            apply(api, body)
            print(f"applied {body['kind']} {namespace}/{body['metadata']['name']}", file=out)
        caught_up = smoke.run(
            api, namespace, MIRROR, smoke.Clusters(kafka_a, kafka_b), out, timeout
        )
        show_status(api, namespace, out)
        if caught_up and run_audit(api, namespace, out):
            return True
        print(f"the pods:\n{pods.diagnostics(api, namespace)}", file=out)
        print(f"the operator's log: {operator.log_path}", file=out)
        return False
    finally:
        operator.stop()


def run(out: TextIO) -> bool:
    if reason := unavailable_reason():
        print(ON_KIND.format(reason=reason), file=out)
        return False
    workdir = stack.stack_dir() / "demo"
    shutil.rmtree(workdir, ignore_errors=True)  # the last run's logs
    node = KubeNode(workdir / "node")
    clusters = [LocalKafka(alias, workdir / f"kafka-{alias}", host=GATEWAY) for alias in "AB"]
    try:
        progress("starting the node (the first run builds it: docs/dev-stack.md)")
        node.start()
        for cluster in clusters:
            progress(f"starting Kafka {cluster.alias} on {GATEWAY}, where pods reach it")
            cluster.start()
        a, b = (cluster.bootstrap_servers for cluster in clusters)
        with api_client(node.kubeconfig) as api:
            ok = run_demo(
                api, node.kubeconfig, node.image, node.audit_image, a, b, NAMESPACE, workdir, out
            )
    finally:
        for cluster in clusters:
            cluster.stop()
        problems = node.remove()
    if problems:
        print(f"the node left the host changed: {problems}", file=out)
        return False
    print(
        f"\nThe node, Kafka and the operator stopped; the host is as it was. Logs: {workdir}",
        file=out,
    )
    return ok
