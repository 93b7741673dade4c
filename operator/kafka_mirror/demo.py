"""The main job on the embedded default stack: what a newcomer runs first.

Brings up Kafka A and B and the API server, installs the CRDs, starts the operator, applies the
example mirror and selection (pointed at the local clusters), runs the worker pods the operator
asks for as local processes (no nodes here), produces sample traffic on A, shows the mirror's
status as `kubectl` would once it is Ready with no lag, and runs the audit CronJob's job once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TextIO

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client
from kubernetes.client import ApiClient

from kafka_mirror.api.models import API_VERSION, GROUP, VERSION
from kafka_mirror.devstack import stack
from kafka_mirror.devstack.builds import REPO_ROOT
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.devstack.operator import OperatorProcess
from kafka_mirror.kube import api_client, apply, install_crds, table

NAMESPACE = "kafka-mirror-demo"
EXAMPLES = REPO_ROOT / "examples"
# The example selection takes accounting.* but not *.scratch; hr.* is not selected at all.
SAMPLE_TOPICS = {
    "accounting.invoices": 3,
    "accounting.payments": 3,
    "accounting.tmp.scratch": 1,
    "hr.salaries": 1,
}
SAMPLE_RECORDS = 2_000


def example_objects(kafka_a: str, kafka_b: str, namespace: str) -> list[dict[str, Any]]:
    """The example mirror and selection, in `namespace`, pointed at the given clusters."""
    mirror = yaml.safe_load((EXAMPLES / "kafkamirror-a-to-b.yaml").read_text())
    mirror["spec"]["source"]["bootstrapServers"] = kafka_a
    mirror["spec"]["target"]["bootstrapServers"] = kafka_b
    selection = yaml.safe_load((EXAMPLES / "selection-accounting.yaml").read_text())
    for body in (mirror, selection):
        body["metadata"]["namespace"] = namespace
    return [mirror, selection]


def produce_sample_traffic(kafka_a: str, out: TextIO) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_a})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(t, n) for t, n in SAMPLE_TOPICS.items() if t not in existing]
    for future in admin.create_topics(new).values() if new else []:
        future.result()
    producer = Producer({"bootstrap.servers": kafka_a, "linger.ms": 20})
    for topic in SAMPLE_TOPICS:
        for i in range(SAMPLE_RECORDS):
            producer.produce(topic, key=f"key-{i}", value=f"{topic} record {i}")
            producer.poll(0)
    producer.flush(30)
    print(f"produced {SAMPLE_RECORDS} records to each of {', '.join(SAMPLE_TOPICS)} on A", file=out)


def _mirror(api: ApiClient, namespace: str) -> dict[str, Any]:
    found: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", "a-to-b"
    )
    return dict(found)


def _ready(mirror: dict[str, Any]) -> dict[str, Any]:
    conditions = mirror.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), {})


def wait_until_mirrored(api: ApiClient, namespace: str, out: TextIO, timeout: float) -> bool:
    """Wait for Ready, both selected topics active and no lag, printing what is awaited."""
    deadline, shown = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        mirror = _mirror(api, namespace)
        status, ready = mirror.get("status", {}), _ready(mirror)
        line = (
            f"  Ready={ready.get('status', '-')} ({ready.get('reason', 'no status yet')}), "
            f"active topics {status.get('activeTopicCount', 0)}, lag {status.get('totalLag', '-')}"
        )
        if line != shown:
            print(line, file=out, flush=True)
            shown = line
        if (
            ready.get("status") == "True"
            and status.get("activeTopicCount") == 2
            and status.get("totalLag") == 0
        ):
            return True
        time.sleep(1)
    return False


def show_status(api: ApiClient, namespace: str, out: TextIO) -> None:
    for kind, plural in (
        ("KafkaMirror", "kafkamirrors"),
        ("MirrorTopicSelection", "mirrortopicselections"),
    ):
        print(f"\n$ kubectl get {plural} -n {namespace}", file=out)
        print(table(api, API_VERSION, kind, namespace), file=out)
    status = _mirror(api, namespace).get("status", {})
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
    audit = _mirror(api, namespace).get("status", {}).get("lastAudit", {})
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
        produce_sample_traffic(kafka_a, out)
        print("waiting for the mirror to catch up:", file=out, flush=True)
        caught_up = wait_until_mirrored(api, namespace, out, timeout)
        show_status(api, namespace, out)
        if not caught_up:
            print(f"the mirror did not catch up in {timeout:.0f}s; see {workdir}", file=out)
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
