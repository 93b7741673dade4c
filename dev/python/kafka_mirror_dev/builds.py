"""Install the real parts of the dev stack into the user cache: Kafka's jars from Maven Central,
etcd, kube-apiserver (and the node's kubelet, controller manager, scheduler and kube-proxy),
kubectl and Helm built from their pinned Go modules under `dev/`.

Each artifact's cache key is a hash of the files that pin it, so a version bump rebuilds and an
unchanged pin is reused. Builds take a file lock, so parallel callers build once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DEV_DIR = REPO_ROOT / "dev"


class MissingPrerequisite(RuntimeError):
    """A tool the dev stack needs is not installed; the message says how to install it."""


_FIXES = {
    "java": "install a Java 17+ runtime, e.g. `apt-get install openjdk-17-jdk-headless`",
    "mvn": "install Maven, e.g. `apt-get install maven`",
    "go": "install Go 1.26+ (the pinned Helm needs it), e.g. from your OS packages or go.dev",
}


def require(command: str) -> str:
    """The path of `command`, or a MissingPrerequisite naming the fix."""
    path = shutil.which(command)
    if path is None:
        raise MissingPrerequisite(f"`{command}` was not found on PATH: {_FIXES[command]}")
    return path


def cache_dir() -> Path:
    """Where built and downloaded parts live: $KAFKA_MIRROR_CACHE, else the user cache dir."""
    explicit = os.environ.get("KAFKA_MIRROR_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-mirror"


def progress(message: str) -> None:
    print(f"[kafka-mirror dev] {message}", file=sys.stderr, flush=True)


@contextmanager
def locked(name: str) -> Iterator[None]:
    lock_path = cache_dir() / "locks" / f"{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pin_hash(*pins: Path | str) -> str:
    """A short hash of the files (and strings) that pin an artifact."""
    digest = hashlib.sha256()
    for pin in pins:
        digest.update(pin.read_bytes() if isinstance(pin, Path) else pin.encode())
    return digest.hexdigest()[:12]


def _run_logged(command: list[str], cwd: Path, log: Path, env: dict[str, str]) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        result = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"`{' '.join(command)}` failed (full log: {log}):\n{tail}")


def _module_version(module_dir: Path, module: str) -> str:
    for line in (module_dir / "go.mod").read_text().splitlines():
        parts = line.split()
        if parts[:1] == [module] and len(parts) > 1:
            return parts[1]
    raise RuntimeError(f"{module} is not required in {module_dir / 'go.mod'}")


def _kubernetes_version_flags(module: str) -> Callable[[Path], str]:
    """Kubernetes binaries report `v0.0.0-master` unless told their version, and Helm then
    refuses charts with a `kubeVersion` constraint; so stamp the pinned version of `module` in,
    as Kubernetes' Makefile does. A staging module's v0.X.Y is Kubernetes v1.X.Y.
    """

    def flags(module_dir: Path) -> str:
        version = _module_version(module_dir, module)
        if version.startswith("v0."):
            version = "v1." + version.removeprefix("v0.")
        major, minor = version.lstrip("v").split(".")[:2]
        package = "k8s.io/component-base/version"
        return (
            f"-X {package}.gitVersion={version} -X {package}.gitMajor={major} "
            f"-X {package}.gitMinor={minor} -X {package}.gitTreeState=clean"
        )

    return flags


# Several checkouts of the repository (git worktrees) share the cache and may pin different
# versions: a binary of another pin is removed only once nobody has used it for this long.
STALE_AFTER_SECONDS = 14 * 24 * 3600


@dataclass(frozen=True)
class GoTool:
    """A binary built from the module in `dev/go/<module>` (by default the tool's own name),
    which pins it with a tool line (or, with package ".", carries the main package itself)."""

    name: str
    package: str
    stamp_version: Callable[[Path], str] | None = None
    module: str | None = None

    @property
    def module_dir(self) -> Path:
        return DEV_DIR / "go" / (self.module or self.name)

    def ldflags(self) -> str:
        stamp = self.stamp_version(self.module_dir) if self.stamp_version else ""
        return f"-s -w {stamp}".strip()

    def path(self) -> Path:
        sources = sorted(self.module_dir.glob("*.go"))  # a main package kept in the module
        key = _pin_hash(
            self.module_dir / "go.mod", self.module_dir / "go.sum", *sources, self.ldflags()
        )
        return cache_dir() / "bin" / f"{self.name}-{key}"

    def ensure(self) -> Path:
        binary = self.path()
        if binary.exists():
            binary.touch()  # in use: see STALE_AFTER_SECONDS
            return binary
        go = require("go")
        with locked(self.name):
            if binary.exists():
                return binary
            progress(f"building {self.name} from its Go module (first run only; several minutes)")
            started = time.monotonic()
            env = {
                **os.environ,
                "GOTOOLCHAIN": "local",
                "CGO_ENABLED": "0",
                "GOFLAGS": "-mod=readonly",
            }
            partial = binary.with_suffix(".partial")
            _run_logged(
                [go, "build", f"-ldflags={self.ldflags()}", "-o", str(partial), self.package],
                cwd=self.module_dir,
                log=cache_dir() / "logs" / f"build-{self.name}.log",
                env=env,
            )
            partial.rename(binary)
            for other in binary.parent.glob(f"{self.name}-*"):
                if time.time() - other.stat().st_mtime > STALE_AFTER_SECONDS:
                    other.unlink()  # built from a pin nobody has used lately
            progress(f"built {self.name} in {time.monotonic() - started:.0f}s: {binary}")
        return binary


ETCD = GoTool("etcd", "go.etcd.io/etcd/server/v3")


def _kubernetes_command(name: str) -> GoTool:
    """One of Kubernetes' commands, from the same pinned k8s.io/kubernetes module (and go.sum)
    as kube-apiserver, so a node runs the API server's release."""
    return GoTool(
        name,
        f"k8s.io/kubernetes/cmd/{name}",
        _kubernetes_version_flags("k8s.io/kubernetes"),
        module="kube-apiserver",
    )


KUBE_APISERVER = _kubernetes_command("kube-apiserver")
# The node's parts (node.py).
KUBELET = _kubernetes_command("kubelet")
KUBE_CONTROLLER_MANAGER = _kubernetes_command("kube-controller-manager")
KUBE_SCHEDULER = _kubernetes_command("kube-scheduler")
KUBE_PROXY = _kubernetes_command("kube-proxy")
NODE_TOOLS = (KUBELET, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KUBE_PROXY)
# `make kind-e2e` where no registry serves kind's node image (kind.py).
KUBEADM = _kubernetes_command("kubeadm")
KIND = GoTool("kind", "sigs.k8s.io/kind")
COREDNS = GoTool("coredns", "github.com/coredns/coredns")
RUNC_BOUNDED = GoTool("runc-bounded", ".")
# The node's pod sandbox process (its image: images.py).
PAUSE = GoTool("pause", ".")
KUBECTL = GoTool("kubectl", ".", _kubernetes_version_flags("k8s.io/kubectl"))
HELM = GoTool("helm", "helm.sh/helm/v4/cmd/helm")
# The alert rules' unit tests (`promtool test rules`) and the Prometheus that evaluates them
# against the real node's pods, from one pinned module.
PROMTOOL = GoTool("promtool", "github.com/prometheus/prometheus/cmd/promtool", module="prometheus")
PROMETHEUS = GoTool("prometheus", "github.com/prometheus/prometheus/cmd/prometheus")
# Lints the kind e2e's GitHub workflow (which cannot run here).
ACTIONLINT = GoTool("actionlint", "github.com/rhysd/actionlint/cmd/actionlint")


PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
KEDA = "github.com/kedacore/keda/v2"


def pinned_module(pins: str, module: str) -> Path:
    """The files of `module` at the version `dev/go/<pins>` pins, from the Go module proxy
    (checked against its go.sum; a download, no build)."""
    go = require("go")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    found = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=DEV_DIR / "go" / pins,
        env=env,
        capture_output=True,
        text=True,
    )
    info = json.loads(found.stdout or "{}")
    if found.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"could not download {module}: {info.get('Error')}")
    return Path(info["Dir"])


def prometheus_operator_crds() -> Path:
    """The Prometheus Operator's CRD files (ServiceMonitor, PrometheusRule, ...)."""
    return (
        pinned_module("prometheus-operator-crds", PROMETHEUS_OPERATOR)
        / "example"
        / ("prometheus-operator-crd")
    )


def keda_scaledobject_crd() -> Path:
    """KEDA's ScaledObject CRD."""
    return (
        pinned_module("keda-crds", KEDA) / "config" / "crd" / "bases" / "keda.sh_scaledobjects.yaml"
    )


def maven_libs(name: str, what: str) -> Path:
    """A directory of the jars `dev/maven/<name>/pom.xml` names, resolved by Maven once."""
    pom = DEV_DIR / "maven" / name / "pom.xml"
    libs = cache_dir() / f"{name}-{_pin_hash(pom)}" / "libs"
    if (libs.parent / "complete").exists():
        return libs
    require("java")
    mvn = require("mvn")
    with locked(name):
        if (libs.parent / "complete").exists():
            return libs
        progress(f"resolving {what} from Maven Central (first run only)")
        shutil.rmtree(libs, ignore_errors=True)
        _run_logged(
            [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                "--global-settings",
                str(DEV_DIR / "maven" / "settings.xml"),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={libs}",
            ],
            cwd=pom.parent,
            log=cache_dir() / "logs" / f"resolve-{name}.log",
            env=dict(os.environ),
        )
        (libs.parent / "complete").touch()
    return libs


def schema_registry_jar() -> Path:
    """A runnable Apicurio Registry (`dev/maven/schema-registry`), built by Quarkus once."""
    source = DEV_DIR / "maven" / "schema-registry"
    pins = sorted(p for p in source.rglob("*") if p.is_file())
    home = cache_dir() / f"schema-registry-{_pin_hash(*pins)}"
    runner = home / "target" / "schema-registry-1-runner.jar"
    if (home / "complete").exists():
        return runner
    require("java")
    mvn = require("mvn")
    with locked("schema-registry"):
        if (home / "complete").exists():
            return runner
        progress("building Apicurio Registry from Maven Central (first run only; a minute)")
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(source, home)
        _run_logged(
            [mvn, "-B", "-q", "--global-settings", "settings.xml", "package", "-DskipTests"],
            cwd=home,
            log=cache_dir() / "logs" / "build-schema-registry.log",
            env=dict(os.environ),
        )
        (home / "complete").touch()
    return runner


def kafka_libs() -> Path:
    """Kafka's jars: broker, tools, MirrorMaker 2."""
    return maven_libs("kafka", "Apache Kafka")


def spark_jars_dir() -> Path:
    """Spark's Kafka source and its dependencies: what the image has in $KAFKA_MIRROR_SPARK_JARS."""
    return maven_libs("spark-kafka", "Spark's Kafka source")


def spark_kafka_jars() -> list[Path]:
    return sorted(spark_jars_dir().glob("*.jar"))


def export_spark_jars() -> None:
    """Give the audit (kafka_mirror.audit.spark) the jars resolved here, as the image gives it
    its own: for this process and the processes it starts, unless the environment names some."""
    from kafka_mirror.audit.spark import JARS_ENV  # imports PySpark: only when jars are wanted

    if not os.environ.get(JARS_ENV):
        os.environ[JARS_ENV] = str(spark_jars_dir())


def ensure_all() -> None:
    """Install every part (for CI warm-up and `kafka-mirror dev build`)."""
    kafka_libs()
    spark_kafka_jars()
    schema_registry_jar()
    tools = (ETCD, KUBE_APISERVER, KUBECTL, HELM, ACTIONLINT, PROMTOOL, PROMETHEUS)
    for tool in (*tools, *NODE_TOOLS, PAUSE):
        tool.ensure()
    prometheus_operator_crds()
    keda_scaledobject_crd()
