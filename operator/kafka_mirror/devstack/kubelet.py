"""Stand-in for the kubelet and the Deployment controller, for an API server with no nodes.

It runs the pods of every Deployment in a namespace as local processes, exactly as each pod
template says: the container's command and arguments, its environment (Secret and ConfigMap
references resolved as the kubelet resolves them), its ConfigMap/Secret/emptyDir volumes
materialised in a directory (mount paths in the arguments point there), `spec.replicas` pods,
restarts of exited containers, a rollout when the template changes, readiness from the
container's HTTP probe, and the Deployment's status.

Local processes share one network namespace, so each named container port is mapped to a free
local port, handed to the process as KAFKA_MIRROR_<NAME>_PORT (our commands read it; a pod
would not need it), and probes on that port go to the local one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.audit.spark import JARS_ENV
from kafka_mirror.devstack.builds import spark_kafka_jars
from kafka_mirror.devstack.processes import free_port


class PodConfigError(Exception):
    """What the kubelet reports as CreateContainerConfigError (a missing Secret, say)."""


@dataclass
class LocalPod:
    name: str
    template_hash: str
    directory: Path
    ports: dict[int | str, int] = field(default_factory=dict)  # container port → local
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    ready: bool = False
    problem: str = ""
    volumes: dict[str, Path] = field(default_factory=dict)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        path = self.directory / "container.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, grace: float = 30) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class LocalKubelet:
    """Runs a namespace's Deployments locally until `stop()`; `sync()` does one pass."""

    def __init__(self, api: client.ApiClient, namespace: str, workdir: Path) -> None:
        self.api, self.namespace, self.workdir = api, namespace, workdir
        self.pods: dict[str, list[LocalPod]] = {}  # by Deployment
        self._serial = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, every: float = 0.5) -> LocalKubelet:
        def loop() -> None:
            while not self._stopping.wait(every):
                try:
                    self.sync()
                except (ApiException, urllib3.exceptions.HTTPError) as error:
                    # As a kubelet, keep the pods running while the API server is away.
                    reason = getattr(error, "reason", error)
                    print(f"[local-kubelet] {self.namespace}: {reason}", file=sys.stderr)

        self._thread = threading.Thread(target=loop, name=f"kubelet-{self.namespace}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(60)
        for pods in self.pods.values():
            for pod in pods:
                pod.stop()
        self.pods = {}

    def pods_of(self, deployment: str) -> list[LocalPod]:
        return list(self.pods.get(deployment, []))

    # --- one pass ---------------------------------------------------------------------------

    def sync(self) -> None:
        deployments = self.apps.list_namespaced_deployment(self.namespace).items
        names = {d.metadata.name for d in deployments if d.metadata}
        for gone in [name for name in self.pods if name not in names]:
            for pod in self.pods.pop(gone):  # deleted: its pods go
                pod.stop()
        for deployment in deployments:
            self._sync_deployment(deployment)

    def _sync_deployment(self, deployment: Any) -> None:
        name = deployment.metadata.name
        pods = self.pods.setdefault(name, [])
        template = self.api.sanitize_for_serialization(deployment.spec.template)
        template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
        replicas = deployment.spec.replicas if deployment.spec.replicas is not None else 1
        for pod in [p for p in pods if p.template_hash != template_hash]:
            pod.stop()  # a rollout (all at once: Recreate)
            pods.remove(pod)
        while len(pods) > replicas:
            pods.pop().stop()
        while len(pods) < replicas:
            self._serial += 1
            pod_name = f"{name}-{template_hash[:10]}-{self._serial}"
            directory = self.workdir / pod_name
            directory.mkdir(parents=True, exist_ok=True)
            pods.append(LocalPod(pod_name, template_hash, directory))
        spec = template["spec"]
        for pod in pods:
            self._run(pod, spec)
        self._report(deployment, pods, template_hash)

    def _run(self, pod: LocalPod, spec: dict[str, Any]) -> None:
        container = spec["containers"][0]
        try:
            self._materialise_volumes(pod, spec.get("volumes", []))  # kubelet resyncs these
            if pod.running():
                pod.ready = self._probe(pod, container.get("readinessProbe"))
                return
            if pod.process is not None:
                pod.restarts += 1
            self._start(pod, spec)
        except PodConfigError as error:
            pod.problem, pod.ready = str(error), False

    def _start(self, pod: LocalPod, spec: dict[str, Any]) -> None:
        container = spec["containers"][0]
        env = self._environment(pod, container)
        if spec.get("automountServiceAccountToken", True):  # Kubernetes' default is to mount
            account = spec.get("serviceAccountName", "default")
            env["KUBECONFIG"] = str(self._service_account(pod, account))
        command = [self._mapped(pod, container, a) for a in container.get("command", [])]
        args = [self._mapped(pod, container, a) for a in container.get("args", [])]
        with (pod.directory / "container.log").open("ab") as log:
            pod.process = subprocess.Popen(
                command + args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=pod.directory
            )
        pod.problem, pod.ready = "", False

    def run_job(self, cronjob: str, timeout: float = 600) -> LocalPod:
        """One run of a CronJob's job template, to completion (what the CronJob and Job
        controllers and the kubelet would do at the schedule)."""
        found = client.BatchV1Api(self.api).read_namespaced_cron_job(cronjob, self.namespace)
        template = self.api.sanitize_for_serialization(found)["spec"]["jobTemplate"]["spec"][
            "template"
        ]
        self._serial += 1
        pod = LocalPod(f"{cronjob}-{self._serial}", "", self.workdir / f"{cronjob}-{self._serial}")
        pod.directory.mkdir(parents=True, exist_ok=True)
        self._materialise_volumes(pod, template["spec"].get("volumes", []))
        self._start(pod, template["spec"])
        assert pod.process is not None
        pod.process.wait(timeout)
        return pod

    def _service_account(self, pod: LocalPod, account: str) -> Path:
        """The pod's service-account identity, as a kubeconfig: a token the API server issues
        for that account (TokenRequest), the server's address and CA. In a pod the kubelet
        projects the same token into the container's file system."""
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        issued = self.core.create_namespaced_service_account_token(
            account, self.namespace, request
        ).status
        assert issued is not None
        token = issued.token
        configuration = self.api.configuration
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": configuration.host,
                        "certificate-authority": configuration.ssl_ca_cert,
                    },
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {"cluster": "local", "user": account, "namespace": self.namespace},
                }
            ],
            "current-context": "pod",
        }
        path = pod.directory / "serviceaccount.kubeconfig"
        path.write_text(json.dumps(kubeconfig))
        return path

    def _report(self, deployment: Any, pods: list[LocalPod], template_hash: str) -> None:
        ready = sum(1 for p in pods if p.ready)
        status = {
            "observedGeneration": deployment.metadata.generation,
            "replicas": len(pods),
            "updatedReplicas": sum(1 for p in pods if p.template_hash == template_hash),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        current = self.api.sanitize_for_serialization(deployment.status) or {}
        if all(current.get(k, 0) == v for k, v in status.items()):
            return
        self.apps.patch_namespaced_deployment_status(
            deployment.metadata.name, self.namespace, {"status": status}
        )

    # --- what the kubelet resolves ----------------------------------------------------------

    def _secret_value(self, name: str, key: str) -> str:
        try:
            secret = self.core.read_namespaced_secret(name, self.namespace)
        except ApiException as error:
            if error.status == 404:
                raise PodConfigError(f'secret "{name}" not found') from error
            raise
        data = secret.data or {}
        if key not in data:
            raise PodConfigError(f"couldn't find key {key} in Secret {self.namespace}/{name}")
        return base64.b64decode(data[key]).decode()

    def _secret_keys(self, name: str) -> list[str]:
        try:
            return list(self.core.read_namespaced_secret(name, self.namespace).data or {})
        except ApiException as error:
            if error.status == 404:
                raise PodConfigError(f'secret "{name}" not found') from error
            raise

    def _config_map(self, name: str) -> dict[str, str]:
        try:
            return self.core.read_namespaced_config_map(name, self.namespace).data or {}
        except ApiException as error:
            if error.status == 404:
                raise PodConfigError(f'configmap "{name}" not found') from error
            raise

    def _environment(self, pod: LocalPod, container: dict[str, Any]) -> dict[str, str]:
        # The image's environment: this interpreter's bin directory holds `kafka-mirror`, and
        # the image bakes in Spark's Kafka source (here: the dev cache's copy).
        bin_dir = str(Path(sys.executable).parent)
        env = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "HOME": str(pod.directory),
            JARS_ENV: str(spark_kafka_jars()[0].parent),
        }
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            source = item["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[item["name"]] = self._secret_value(ref["name"], ref["key"])
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                env[item["name"]] = self._config_map(ref["name"]).get(ref["key"], "")
            elif "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                env[item["name"]] = {"metadata.name": pod.name}.get(path, self.namespace)
        for port in container.get("ports", []):
            local = pod.ports.get(port["containerPort"]) or free_port()
            pod.ports[port["containerPort"]] = local
            if "name" in port:
                pod.ports[port["name"]] = local
                env[f"KAFKA_MIRROR_{port['name'].upper()}_PORT"] = str(local)
        return env

    def _materialise_volumes(self, pod: LocalPod, volumes: list[dict[str, Any]]) -> None:
        for volume in volumes:
            directory = pod.directory / "volumes" / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            pod.volumes[volume["name"]] = directory
            if "configMap" in volume:
                files = self._config_map(volume["configMap"]["name"])
            elif "secret" in volume:
                name = volume["secret"]["secretName"]
                files = {k: self._secret_value(name, k) for k in self._secret_keys(name)}
            else:
                continue  # emptyDir: just the directory
            for key, text in files.items():
                path = directory / key
                if not path.exists() or path.read_text() != text:
                    partial = path.with_suffix(".partial")
                    partial.write_text(text)
                    partial.replace(path)  # atomic, as the kubelet swaps its symlink

    def _mapped(self, pod: LocalPod, container: dict[str, Any], arg: str) -> str:
        """An argument with a volume's mount path replaced by where the volume lives here."""
        for mount in container.get("volumeMounts", []):
            path = mount["mountPath"].rstrip("/")
            if arg == path or arg.startswith(path + "/"):
                return str(pod.volumes[mount["name"]]) + arg[len(path) :]
        return arg

    def _probe(self, pod: LocalPod, probe: dict[str, Any] | None) -> bool:
        if probe is None:
            return True
        http = probe.get("httpGet", {})
        port = pod.ports.get(http.get("port", ""))
        if port is None:
            return False  # a port the container does not declare
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}{http.get('path', '/')}", timeout=2
            ):
                return True
        except OSError:
            return False
