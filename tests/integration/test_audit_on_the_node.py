"""The audit on Spark on Kubernetes on the real node: the CronJob's pod is Spark's driver, the
kubelet runs the executor pods it asks for (under the chart's admission policy), they reach the
driver over the pod network and Kafka at the bridge address. The verdict and counts equal local
mode's on the same records; a rogue executor started beside them from everything their pods
carry but the run's secret is refused by the driver; the executors are deleted when the run
succeeds, stop when their driver is killed, and go with its pod, even while another driver of
the Job runs. Both runs are
timed: docs/audit.md has the figure for a million records, `AUDIT_ON_NODE_RECORDS=1000000`
(in the suite a tenth of that: the Spark work of the suite's longest line)."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.kube import apply
from kafka_mirror.render import audit_cronjob_name
from kafka_mirror_dev import pods
from kafka_mirror_dev.apiserver import KUBERNETES_SERVICE_IP
from kafka_mirror_dev.node import KubeNode
from tests.helpers.helm import delete_policy, executor_policy
from tests.helpers.kafka import create_topics, unique
from tests.helpers.matrix import traffic
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection, status_of
from tests.helpers.worker import group_offsets, wait_for, wait_while_advancing

# The node's pods have no DNS: the `kubernetes` Service by its address (in the API server's
# certificate).
MASTER = f"k8s://https://{KUBERNETES_SERVICE_IP}:443"
RECORDS = int(os.environ.get("AUDIT_ON_NODE_RECORDS", 100_000))
EXECUTORS = 2
NAME = "audited"
EXECUTOR_PODS = "spark-role=executor"
COUNTS = ("result", "recordsChecked", "missing", "duplicates", "altered", "lostToRetention")

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node, pytest.mark.spark]


class ExecutorWatch(threading.Thread):
    """Every executor pod seen in the namespace while it runs (name → image and owner), and
    every phase any of them was seen in."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        super().__init__(daemon=True)
        self.core, self.namespace = core, namespace
        self.seen: dict[str, tuple[str, str]] = {}
        self.phases: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for pod in self.core.list_namespaced_pod(
                self.namespace, label_selector=EXECUTOR_PODS
            ).items:
                owners = pod.metadata.owner_references or []
                owner = owners[0].name if owners else ""
                self.seen[pod.metadata.name] = (pod.spec.containers[0].image, owner)
                self.phases.add(pod.status.phase)

    def end(self) -> None:
        self.done.set()
        self.join(10)


class RogueExecutor(threading.Thread):
    """A pod beside the audit that starts a Spark executor as the driver's own pods do, from
    everything one of them carries (the driver's address, the application, the settings), with
    a guessed secret in place of the run's: started as soon as the driver's first executor pod
    exists, so it knocks while the driver works."""

    NAME = "rogue-executor"
    SECRET = "_SPARK_AUTH_SECRET"

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api, self.core, self.namespace = api, client.CoreV1Api(api), namespace
        self.carried_secret = False  # the driver's executor pods carry the run's secret
        self.driver_running = False  # the driver still ran when the rogue had ended
        self.log = ""
        self.failed = False
        self.executor_log = ""  # the model executor's, meanwhile
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            wait_for(lambda: executors(self.core, self.namespace), 300, "an executor pod")
            model = executors(self.core, self.namespace)[0]
            driver = model.metadata.owner_references[0].name
            self.core.create_namespaced_pod(self.namespace, self._pod(model))

            def ended() -> Any:
                pod = self.core.read_namespaced_pod(self.NAME, self.namespace)
                return pod.status.phase in ("Succeeded", "Failed")

            wait_for(ended, 300, "the rogue executor to end")
            phase = self.core.read_namespaced_pod(driver, self.namespace).status.phase
            self.driver_running = phase == "Running"
            self.log = pods.log_of(self.core, self.namespace, self.NAME)
            self.executor_log = pods.log_of(self.core, self.namespace, model.metadata.name)
            self.failed = (
                self.core.read_namespaced_pod(self.NAME, self.namespace).status.phase == "Failed"
            )
        except BaseException as error:  # re-raised by the test
            self.error = error

    def _pod(self, model: Any) -> dict[str, Any]:
        spec = self.api.sanitize_for_serialization(model.spec)
        container = spec["containers"][0]
        env = [e for e in container["env"] if e["name"] != self.SECRET]
        self.carried_secret = len(env) < len(container["env"])
        overrides = {"SPARK_EXECUTOR_ID": "99", "SPARK_EXECUTOR_POD_NAME": self.NAME}
        env = [
            {"name": e["name"], "value": overrides[e["name"]]} if e["name"] in overrides else e
            for e in env
        ]
        env.append({"name": self.SECRET, "value": "a-guess"})
        container = {k: container[k] for k in ("image", "command", "args", "securityContext")}
        container |= {
            "name": "rogue",
            "env": env,
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }
        return {
            "metadata": {"name": self.NAME},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": spec["securityContext"],
                "containers": [container],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
            },
        }

    def end(self) -> None:
        self.join(600)
        if self.error is not None:
            raise self.error


def executors(core: client.CoreV1Api, namespace: str) -> list[Any]:
    return list(core.list_namespaced_pod(namespace, label_selector=EXECUTOR_PODS).items)


def none_left(core: client.CoreV1Api, namespace: str, timeout: float) -> None:
    wait_for(
        lambda: not executors(core, namespace),
        timeout,
        lambda: f"no executor pod left: {[p.metadata.name for p in executors(core, namespace)]}",
    )


@pytest.mark.operator_args("--allowed-spark-master", MASTER)
@pytest.mark.timeout(1800)
def test_the_audit_runs_executor_pods_on_the_node_and_leaves_none(
    node_stack: NodeStack, kube_node: KubeNode, helm: Path, tmp_path: Path
) -> None:
    api = node_stack.api
    policy = executor_policy(
        helm, tmp_path / "helm", unique("release"), MASTER, kube_node.audit_image
    )
    for document in policy:
        apply(api, document)
    try:
        drill(node_stack, kube_node, tmp_path)
    finally:
        delete_policy(api, policy)


def drill(node_stack: NodeStack, kube_node: KubeNode, tmp_path: Path) -> None:
    """Local mode, then executor pods, on the same records; then a run whose driver is killed."""
    api, namespace, a = node_stack.api, node_stack.namespace, node_stack.kafka_a
    core = client.CoreV1Api(api)
    topic = unique("audited")
    create_topics(a.bootstrap_servers, [topic], partitions=8)
    assert traffic(a, topic, tmp_path, "records", rate=150_000, count=RECORDS).finish().failed == 0
    audit: dict[str, Any] = {"schedule": "0 0 1 1 *", "spark": {"master": "local[2]"}}
    source = {"bootstrapServers": a.bootstrap_servers}
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    apply(api, mirror(NAME, namespace, source, target, audit=audit))
    apply(api, selection(f"{NAME}-topics", namespace, NAME, [re.escape(topic)]))
    wait_while_advancing(
        lambda: sum(group_offsets(a, f"kafka-mirror.{namespace}.{NAME}").values()),
        RECORDS,
        120,
        "the worker to copy the topic",
        every=1,
    )
    cronjob = audit_cronjob_name(NAME)

    def run_audit() -> tuple[dict[str, Any], float]:
        started = time.monotonic()
        succeeded, log = node_stack.pods.run_cronjob(cronjob, timeout=900)
        took = time.monotonic() - started
        assert succeeded, log[-4000:]
        return status_of(api, namespace, NAME)["lastAudit"], took

    local, local_took = run_audit()
    assert local["result"] == "Passed" and local["recordsChecked"] == RECORDS, local

    # The same mirror on executor pods, auditing everything again.
    audit["spark"] = {"master": MASTER, "executors": {"instances": EXECUTORS, "cpuRequest": "250m"}}
    audit["fullAuditRequest"] = "on-executors"
    apply(api, mirror(NAME, namespace, source, target, audit=audit))

    def rendered() -> bool:
        job = client.BatchV1Api(api).read_namespaced_cron_job(cronjob, namespace)
        args = job.spec.job_template.spec.template.spec.containers[0].args
        return MASTER in args and "--full-request=on-executors" in args

    wait_for(rendered, 60, "the CronJob rendered for executor pods")
    watch = ExecutorWatch(core, namespace)
    watch.start()
    rogue = RogueExecutor(api, namespace)
    rogue.start()
    on_pods, pods_took = run_audit()
    watch.end()
    rogue.end()
    # The rogue knocked while the driver ran, and the driver closed the connection at the
    # handshake: it never registered (as the driver's own executors did) nor ran a task.
    print(f"the rogue executor's log:\n{rogue.log[:6000]}")
    assert rogue.carried_secret and rogue.driver_running, rogue.log[-3000:]
    assert "Successfully registered with driver" in rogue.executor_log, rogue.executor_log
    assert rogue.failed and "registered with driver" not in rogue.log, rogue.log[-3000:]
    # The driver's answer: its handler of the handshake (no fallback to SASL) said no.
    assert "IllegalArgumentException: Authentication failed." in rogue.log, rogue.log
    assert "AuthRpcHandler.doAuthChallenge" in rogue.log, rogue.log
    seen = watch.seen
    print(
        f"the audit of {RECORDS:,} records, from the job's creation to its end: "
        f"local[2] {local_took:.0f} s, {EXECUTORS} executor pods {pods_took:.0f} s"
    )
    assert len(seen) >= EXECUTORS, seen
    assert {image for image, _ in seen.values()} == {kube_node.audit_image}, seen
    assert "Running" in watch.phases, watch.phases
    # Owned by the driver, the Job's pod: they go with it, however the run ends.
    assert all(owner.startswith(f"{cronjob}-manual-") for _, owner in seen.values()), seen
    assert {k: on_pods[k] for k in COUNTS} == {k: local[k] for k in COUNTS}, (on_pods, local)
    none_left(core, namespace, 60)

    # A run whose driver is killed (as the OOM killer does) while its executors work; the Job
    # then starts a second driver (backoffLimit 1).
    pods.start_now(api, namespace, cronjob)
    wait_for(
        lambda: any(p.status.phase == "Running" for p in executors(core, namespace)),
        180,
        "executor pods running",
    )
    (driver,) = {p.metadata.owner_references[0].name for p in executors(core, namespace)}
    orphans = {p.metadata.name for p in executors(core, namespace)}
    node_stack.pods.kill_process(core.read_namespaced_pod(driver, namespace))

    def stopped() -> bool:
        """Every executor of the killed driver has ended (or is gone already)."""
        left = [p for p in executors(core, namespace) if p.metadata.name in orphans]
        return all(p.status.phase in ("Succeeded", "Failed") for p in left)

    wait_for(stopped, 120, "the killed driver's executors to stop on their own")
    # The Jobs removed, as the CronJob's history limit removes them, the second driver's run
    # not waited for (however far it got): the garbage collector takes the drivers' pods and,
    # with them, the executor pods they own.
    batch = client.BatchV1Api(api)
    for job in batch.list_namespaced_job(namespace).items:
        batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
    none_left(core, namespace, 120)
