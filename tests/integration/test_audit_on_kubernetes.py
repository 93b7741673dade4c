"""The audit on Spark on Kubernetes against the real API server, with the audit's own
ServiceAccount and Role as the operator renders them: the real Spark driver (`kafka-mirror audit
--master k8s://…`) asks the API server for executor pods from the rendered template, and a
stand-in for the kubelet (this API server has none) runs each pod's container as the pod says:
its command (`kafka-mirror executor`), arguments and environment. The verdict and counts equal
local mode's on the same records; no executor pod is left after the run; and the driver's
account may manage pods in its namespace and nothing else, and only pods shaped like its
executors (the chart's admission policy, rendered by Helm and in force while the driver runs).
(On the real node, with the kubelet, docs/audit.md.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kafka_mirror import render_spark
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.kube import apply
from kafka_mirror.render import MIRROR_LABEL
from kafka_mirror.render_audit import build_audit_rbac, build_executor_template
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import export_spark_jars
from kafka_mirror_dev.processes import free_port
from tests.helpers.helm import delete_policy, executor_policy
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import wait_for, wait_until_mirrored, worker_config

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.spark]
MIRROR = "m"
EXECUTORS = 2
IMAGE = "registry.example/audit:1"


class StandInKubelet(threading.Thread):
    """Runs each executor pod the driver creates, as a kubelet would run its container (the
    field references resolved for a pod on this host); ends with the driver."""

    def __init__(self, api: client.ApiClient, namespace: str, workdir: Path) -> None:
        super().__init__(daemon=True)
        self.core, self.namespace, self.workdir = client.CoreV1Api(api), namespace, workdir
        self.started: dict[str, subprocess.Popen[bytes]] = {}
        self.scratch = workdir / "executor-tmp"
        self.scratch.mkdir()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.5):
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector="spark-role=executor"
            ).items
            for pod in pods:
                if pod.metadata.name not in self.started:
                    self.started[pod.metadata.name] = self._start(pod)

    def _start(self, pod: Any) -> subprocess.Popen[bytes]:
        container = pod.spec.containers[0]
        fields = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": self.namespace,
            "status.podIP": "127.0.0.1",
        }
        env = {**os.environ}
        for item in container.env or []:
            ref = item.value_from.field_ref.field_path if item.value_from else None
            env[item.name] = fields[ref] if ref else item.value
        command = [*container.command, *container.args]
        assert command == ["kafka-mirror", "executor"], command
        log = (self.workdir / f"{pod.metadata.name}.log").open("wb")
        # Its pod's read-only root: the executor writes only to its scratch space.
        env["TMPDIR"] = str(self.scratch)
        return subprocess.Popen(
            [sys.executable, "-m", "kafka_mirror", *command[1:]],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def end(self) -> None:
        self.stop.set()
        self.join(10)
        for process in self.started.values():
            if process.poll() is None:
                process.kill()


def pod_volumes(template: str) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = yaml.safe_load(template)["spec"]["volumes"]
    return volumes


def secret_env(template: str) -> dict[str, Any]:
    """The executor's container, with a Secret's key in its environment."""
    container: dict[str, Any] = yaml.safe_load(template)["spec"]["containers"][0]
    reference = {"secretKeyRef": {"name": "team-credentials", "key": "password"}}
    env = [{"name": "P", "valueFrom": reference}]
    return container | {"image": IMAGE, "args": ["executor"], "env": env}


def container_with(template: str, **fields: Any) -> dict[str, Any]:
    """The executor's container, of the probe's image, with `fields` changed."""
    container: dict[str, Any] = yaml.safe_load(template)["spec"]["containers"][0]
    return container | {"image": IMAGE, "args": ["executor"], **fields}


def privileged(template: str, security: dict[str, Any]) -> dict[str, Any]:
    """The executor's container with `security` added to its security context."""
    container = container_with(template)
    return container | {"securityContext": {**container["securityContext"], **security}}


def audit(config_path: Path, master: str, conf: dict[str, str], env: dict[str, str]) -> Any:
    """`kafka-mirror audit` as the CronJob's pod runs it; its JSON report."""
    args = [sys.executable, "-m", "kafka_mirror", "audit", "--config", str(config_path)]
    args += ["--master", master, "--no-status", "--full"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_audit_runs_on_executor_pods_and_agrees_with_local_mode(
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    stack: MirrorStack,
    kubectl: Path,
    helm: Path,
    tmp_path: Path,
) -> None:
    topic = unique("k8s-audit")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=4)
    produce(stack.kafka_a.bootstrap_servers, topic, records(20_000, partitions=4))
    raw = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    worker = stack.start_worker(raw)
    wait_until_mirrored(stack.kafka_a, raw, topic)
    assert worker.stop() == 0
    config_path = tmp_path / "worker.yaml"
    config_path.write_text(yaml.safe_dump(raw))

    # The audit's account and template, as the operator renders them for a k8s:// master.
    master = f"k8s://{kube_apiserver.url}"
    spec = KafkaMirrorSpec.model_validate(
        {
            "source": {"alias": "A", "bootstrapServers": stack.kafka_a.bootstrap_servers},
            "target": {"alias": "B", "bootstrapServers": stack.kafka_b.bootstrap_servers},
            "audit": {"spark": {"master": master, "executors": {"instances": EXECUTORS}}},
        }
    )
    for child in build_audit_rbac(namespace, MIRROR, spec):
        apply(kube_api, child)
    account = f"{MIRROR}-audit"
    template = build_executor_template(MIRROR, spec)
    assert template is not None
    (tmp_path / render_spark.EXECUTOR_TEMPLATE).write_text(template)
    token = (
        client.CoreV1Api(kube_api)
        .create_namespaced_service_account_token(
            account,
            namespace,
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
        )
        .status.token
    )
    (tmp_path / "token").write_text(token)

    def as_driver(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        driver = f"--as=system:serviceaccount:{namespace}:{account}"
        return subprocess.run(
            [str(kubectl), "--kubeconfig", str(kube_apiserver.kubeconfig), *args, driver],
            input=stdin,
            capture_output=True,
            text=True,
        )

    def create_as_driver(changes: dict[str, Any], labels: dict[str, str] | None = None) -> str:
        """Creates, as the driver's account, a pod from the executors' template with `changes`
        to its spec (and `labels` for its own; dry run on the server, where admission runs);
        the refusal, or ""."""
        pod = yaml.safe_load(template)
        pod["metadata"] = {
            "name": "probe",
            "ownerReferences": [driver_owner],
            "labels": {**pod["metadata"]["labels"], "spark-role": "probe"}
            if labels is None
            else labels,
        }
        pod["spec"]["containers"][0] |= {"image": IMAGE, "args": ["executor"]}
        pod["spec"] |= changes
        done = as_driver(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=json.dumps(pod)
        )
        return "" if done.returncode == 0 else done.stderr

    # The driver's own pod: the executors' owner (this API server runs no pod; it is a record).
    driver = "audit-driver"
    client.CoreV1Api(kube_api).create_namespaced_pod(
        namespace,
        {"metadata": {"name": driver}, "spec": {"containers": [{"name": "a", "image": "audit"}]}},
    )
    driver_uid = client.CoreV1Api(kube_api).read_namespaced_pod(driver, namespace).metadata.uid
    driver_owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": driver,
        "uid": driver_uid,
        "controller": True,
    }
    # The chart's admission policy for a k8s:// master, in force once a wrong image is refused.
    policy = executor_policy(helm, tmp_path / "helm", unique("release"), master, IMAGE)
    for document in policy:
        apply(kube_api, document)
    foreign = {"containers": [{"name": "x", "image": "busybox", "command": ["sh"]}]}
    mirror_labels = yaml.safe_load(template)["metadata"]["labels"]
    pod_security = yaml.safe_load(template)["spec"]["securityContext"]
    host_port = {"containerPort": 7079, "hostPort": 7079}
    admin = {"add": ["NET_ADMIN"]}
    config_ref = {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "other", "key": "k"}}}
    unconfined = {"type": "Unconfined"}
    spc = {"type": "spc_t"}
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "id"]}}}
    wait_for(lambda: "only the images" in create_as_driver(foreign), 60, "the policy in force")

    export_spark_jars()
    conf = {
        **render_spark.driver_conf(spec, IMAGE, str(tmp_path)),
        "spark.kubernetes.authenticate.caCertFile": str(kube_apiserver.pki / "ca.crt"),
        "spark.kubernetes.authenticate.oauthTokenFile": str(tmp_path / "token"),
        "spark.driver.port": str(free_port()),
        "spark.driver.blockManager.port": str(free_port()),
    }
    pod_env = {
        "KAFKA_MIRROR_POD_IP": "127.0.0.1",
        "KAFKA_MIRROR_POD_NAME": driver,
        "KAFKA_MIRROR_POD_NAMESPACE": namespace,
    }
    kubelet = StandInKubelet(kube_api, namespace, tmp_path)
    kubelet.start()
    try:
        on_pods = audit(config_path, master, conf, pod_env)
        # The executors Spark made passed the policy; what else the account could make does not.
        assert create_as_driver({}) == ""
        secret = {"name": "s", "secret": {"secretName": "team-credentials"}}
        refusals = [
            ("only the images", foreign),
            ("no service account", {"serviceAccountName": "operator"}),
            ("no service account", {"automountServiceAccountToken": True}),
            ("scratch space", {"volumes": [*pod_volumes(template), secret]}),
            ("reads no Secret", {"containers": [secret_env(template)]}),
            ("no host namespace", {"hostNetwork": True}),
            ("no host port", {"containers": [container_with(template, ports=[host_port])]}),
            (
                "no privilege",
                {
                    "containers": [
                        privileged(template, {"privileged": True, "allowPrivilegeEscalation": True})
                    ]
                },
            ),
            ("no privilege", {"containers": [privileged(template, {"capabilities": admin})]}),
            (
                "no privilege",
                {"containers": [privileged(template, {"allowPrivilegeEscalation": True})]},
            ),
            ("other than 0", {"securityContext": {**pod_security, "runAsUser": 0}}),
            ("other than 0", {"containers": [privileged(template, {"runAsUser": 0})]}),
            ("not on a node", {"nodeName": "the-node"}),
            ("reads no ConfigMap", {"containers": [container_with(template, env=[config_ref])]}),
            ("no priority class", {"priorityClassName": "system-node-critical"}),
            ("no priority class", {"nodeSelector": {"kubernetes.io/hostname": "the-node"}}),
            ("no priority class", {"tolerations": [{"operator": "Exists"}]}),
            ("no proc mount", {"containers": [privileged(template, {"seLinuxOptions": spc})]}),
            ("RuntimeDefault", {"securityContext": {**pod_security, "seccompProfile": unconfined}}),
            ("kafka-mirror executor", {"containers": [container_with(template, args=["sh"])]}),
            ("kafka-mirror executor", {"containers": [container_with(template, lifecycle=hook)]}),
            (
                "no proc mount",
                {"containers": [privileged(template, {"seccompProfile": unconfined})]},
            ),
        ]
        for reason, changes in refusals:
            refusal = create_as_driver(changes)
            assert reason in refusal, (changes, refusal)
        # Only its own mirror's executors: no pod without their labels, or another mirror's.
        for labels in (
            {"spark-role": "executor"},
            {**mirror_labels, MIRROR_LABEL: "other"},
            {**mirror_labels, "app": "someone-elses-service"},
        ):
            assert "executor pods of its mirror" in create_as_driver({}, labels), labels
        refusal = as_driver("delete", "pod", driver, "-n", namespace, "--dry-run=server").stderr
        assert "executor pods of its mirror" in refusal, refusal
    finally:
        kubelet.end()
        delete_policy(kube_api, policy)
    local = audit(config_path, "local[2]", {}, {})

    assert len(kubelet.started) >= EXECUTORS, kubelet.started
    assert list(kubelet.scratch.glob("*.jar")), "the executors fetched the driver's jars elsewhere"
    executor_pod = client.CoreV1Api(kube_api).list_namespaced_pod(namespace).items
    assert [p.metadata.name for p in executor_pod] == [driver]  # the executors are gone
    for key in ("result", "recordsChecked", "missing", "duplicates", "offsetSyncsChecked"):
        assert on_pods[key] == local[key], (key, on_pods, local)
    assert on_pods["recordsChecked"] == 20_000 and on_pods["result"] == "Passed"

    # The driver's account: its namespace's pods, nothing else.
    def can(*what: str) -> str:
        return as_driver("auth", "can-i", *what, "-n", namespace).stdout.strip()

    assert can("create", "pods") == "yes" and can("delete", "pods") == "yes"
    assert can("create", "deployments") == "no" and can("get", "secrets") == "no"
    assert can("create", "pods", "--subresource=exec") == "no"
