"""The main job on the embedded default stack: what a newcomer runs first.

Brings up Kafka A and B and the API server, installs the CRDs, starts the operator, applies the
example mirror and selection (pointed at the local clusters), runs the worker pods the operator
asks for as local processes (no nodes here), produces sample traffic on A, shows the mirror's
status as `kubectl` would once it is Ready with no lag, and runs the audit CronJob's job once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes.client import ApiClient

from kafka_mirror import smoke
from kafka_mirror.api.models import API_VERSION
from kafka_mirror.devstack import stack
from kafka_mirror.devstack.builds import REPO_ROOT
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.devstack.operator import OperatorProcess
from kafka_mirror.kube import api_client, apply, install_crds, table
from kafka_mirror.smoke import read_mirror

NAMESPACE = "kafka-mirror-demo"
MIRROR = "a-to-b"  # the example's name
EXAMPLES = REPO_ROOT / "examples"


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


def run_audit(api: ApiClient, kubelet: LocalKubelet, namespace: str, out: TextIO) -> bool:
    """One run of the mirror's audit CronJob, and its summary as the status shows it."""
    print("\nrunning the audit once (CronJob a-to-b-audit, PySpark in local mode)…", file=out)
    job = kubelet.run_job("a-to-b-audit")
    audit = read_mirror(api, namespace, MIRROR).get("status", {}).get("lastAudit", {})
    command = f"kubectl get kafkamirror a-to-b -n {namespace} -o jsonpath='{{.status.lastAudit}}'"
    print(f"$ {command}", file=out)
    print(yaml.safe_dump({"lastAudit": audit}, sort_keys=False), file=out)
    if job.process is None or job.process.returncode != 0:
        print(f"the audit did not pass; its log: {job.directory / 'container.log'}", file=out)
        return False
    return True


def run_demo(
    api: ApiClient,
    kubeconfig: Path,
    kafka_a: str,
    kafka_b: str,
    namespace: str,
    workdir: Path,
    out: TextIO,
    timeout: float = 180,
) -> bool:
    """The whole main job against a running stack; True when the mirror caught up."""
    install_crds(api)
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    operator = OperatorProcess(kubeconfig, namespace, workdir, status_interval=3).start()
    print(f"operator running (log: {operator.log_path})", file=out)
    kubelet = LocalKubelet(api, namespace, workdir / "pods").start()
    try:
        for body in example_objects(kafka_a, kafka_b, namespace):
            apply(api, body)
            print(f"applied {body['kind']} {namespace}/{body['metadata']['name']}", file=out)
        caught_up = smoke.run(
            api, namespace, MIRROR, smoke.Clusters(kafka_a, kafka_b), out, timeout
        )
        show_status(api, namespace, out)
        if not caught_up:
            print(f"see the operator's and the pods' logs in {workdir}", file=out)
            return False
        return run_audit(api, kubelet, namespace, out)
    finally:
        kubelet.stop()
        operator.stop()


def run(out: TextIO) -> bool:
    info = stack.up()
    print("Dev stack is up:", file=out)
    for key, value in info.env().items():
        print(f"  {key}={value}", file=out)
    workdir = stack.stack_dir() / "demo"
    workdir.mkdir(parents=True, exist_ok=True)
    with api_client(Path(info.kubeconfig)) as api:
        ok = run_demo(
            api, Path(info.kubeconfig), info.kafka_a, info.kafka_b, NAMESPACE, workdir, out
        )
    print(
        "\nThe operator and workers stopped; the stack keeps running. "
        "Stop it with: .venv/bin/kafka-mirror dev down",
        file=out,
    )
    return ok
