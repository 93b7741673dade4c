"""`make kind-e2e` here: dev/kind/e2e.sh, the kind test as it runs on a laptop with Docker and a
registry, given what this machine lacks (docs/dev-stack.md, "kind on this machine"):

- a Docker engine: where none answers, a private one (Debian's docker.io, its files extracted
  into the cache, not installed) on a socket of its own, with no iptables rules and no default
  bridge, running runc through runc-bounded (dev/go/runc-bounded): root's bounding set here
  lacks CAP_SYS_RESOURCE, which kind's privileged node containers ask for;
- kind, kubectl and Helm from their pinned Go modules;
- with the private engine (no registry), what a registry would serve, made here and cached:
  the kind node image (dev/kind/node/: Debian with systemd, containerd and the kubelet, kubeadm
  and kubectl of the pinned Kubernetes, the control plane's images preloaded), Kafka's image
  (dev/kind/kafka-image/) and the project's two images (images.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from kafka_mirror_dev.builds import (
    COREDNS,
    ETCD,
    HELM,
    KIND,
    KUBE_APISERVER,
    KUBE_CONTROLLER_MANAGER,
    KUBE_PROXY,
    KUBE_SCHEDULER,
    KUBEADM,
    KUBECTL,
    KUBELET,
    PAUSE,
    REPO_ROOT,
    RUNC_BOUNDED,
    cache_dir,
    kafka_libs,
    locked,
    progress,
    require,
)
from kafka_mirror_dev.images import SUITE, _buildah, _digest, debootstrap, project_images
from kafka_mirror_dev.processes import stop_pid

KIND_DIR = REPO_ROOT / "dev" / "kind"
E2E_SCRIPT = KIND_DIR / "e2e.sh"
KUBERNETES_VERSION = "v1.35.4"  # the pinned k8s.io/kubernetes (dev/go/kube-apiserver)
DOCKER_PACKAGE = "docker.io"
ENGINE_START_SECONDS = 60.0
# The node: systemd as PID 1, containerd with runc and the CNI plugins, what the kubelet and
# kube-proxy call. The same Debian is the base of kube-proxy's and the pod network's images.
NODE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "containerd", "runc", "containernetworking-plugins",
    "iptables", "nftables", "iproute2", "conntrack", "ethtool", "socat", "kmod", "procps",
    "util-linux", "mount", "ca-certificates",
)  # fmt: skip
KAFKA_PACKAGES = ("openjdk-17-jre-headless",)
# The images kubeadm asks for (`kubeadm config images list`), and the node's pod network.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10.1"
ETCD_IMAGE = "registry.k8s.io/etcd:3.6.6-0"
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.13.1"
NETWORK_IMAGE = "localhost/kind-net:node"  # dev/kind/node/default-cni.yaml
# dev/kind/e2e.sh's image names, and dev/kind/kafka.yaml's image.
E2E_IMAGES = ("kafka-mirror-operator:e2e", "kafka-mirror-operator-audit:e2e")
KAFKA_IMAGE = "apache/kafka:4.1.1"


def _docker(*args: str, env: dict[str, str], stdin: IO[bytes] | None = None) -> str:
    result = subprocess.run(["docker", *args], env=env, stdin=stdin, capture_output=True)
    if result.returncode != 0:
        failure = result.stderr.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"docker {' '.join(args[:2])} failed: {failure}")
    return result.stdout.decode(errors="replace")


def _answers(env: dict[str, str]) -> bool:
    return subprocess.run(["docker", "info"], env=env, capture_output=True).returncode == 0


def _has_image(image: str, env: dict[str, str]) -> bool:
    found = subprocess.run(["docker", "image", "inspect", image], env=env, capture_output=True)
    return found.returncode == 0


class PrivateEngine:
    """dockerd from Debian's package, its state in the cache, on a socket of its own."""

    def __init__(self) -> None:
        self.directory = cache_dir() / "docker"
        self.socket = self.directory / "docker.sock"
        self.pidfile = self.directory / "dockerd.pid"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.socket}"}

    def _package(self) -> Path:
        """The package's files, extracted (not installed: its service would start a dockerd
        of the default settings, with iptables rules on the host)."""
        root = self.directory / "package"
        if (root / "usr/sbin/dockerd").exists():
            return root
        with locked("docker-package"), tempfile.TemporaryDirectory() as download:
            progress(f"downloading Debian's {DOCKER_PACKAGE} (first run only)")
            subprocess.run(
                ["apt-get", "download", DOCKER_PACKAGE], cwd=download, check=True,
                capture_output=True,
            )  # fmt: skip
            (deb,) = Path(download).glob("*.deb")
            root.mkdir(parents=True, exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        return root

    def start(self) -> None:
        package = self._package()
        runtime = RUNC_BOUNDED.ensure()
        require("containerd")  # dockerd starts its own, from PATH
        self.directory.mkdir(parents=True, exist_ok=True)
        bin_path = f"{package / 'usr/sbin'}:{package / 'usr/bin'}:{os.environ['PATH']}"
        with (self.directory / "dockerd.log").open("ab") as log:  # the child keeps its own
            process = subprocess.Popen(
                [
                    str(package / "usr/sbin/dockerd"),
                    f"--host=unix://{self.socket}",
                    f"--data-root={self.directory / 'data'}",
                    f"--exec-root={self.directory / 'run'}",
                    f"--pidfile={self.pidfile}",
                    # Nothing on the host's firewall; no docker0 (kind makes a network of its own).
                    "--iptables=false",
                    "--ip-forward=false",
                    "--ip-masq=false",
                    "--bridge=none",
                    f"--add-runtime=bounded={runtime}",
                    "--default-runtime=bounded",
                ],
                env={**os.environ, "PATH": bin_path},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + ENGINE_START_SECONDS
        while not _answers(self.env):
            if process.poll() is not None or time.monotonic() > deadline:
                stop_pid(process.pid)
                raise RuntimeError(f"dockerd did not start: see {self.directory / 'dockerd.log'}")
            time.sleep(0.5)
        progress(f"started a private Docker engine: DOCKER_HOST={self.env['DOCKER_HOST']}")

    def stop(self) -> None:
        """Stop it, whichever run started it (its pid file says which process it is)."""
        if self.pidfile.exists():
            stop_pid(int(self.pidfile.read_text()), timeout=30.0)


def _debian_image(name: str, packages: tuple[str, ...], env: dict[str, str]) -> str:
    """Debian `SUITE` with `packages`, made with debootstrap and imported (cached by tag)."""
    image = f"localhost/kind-{name}:{_digest(SUITE, *packages)}"
    if _has_image(image, env):
        return image
    progress(f"making {image} with debootstrap (first run only; a few minutes)")
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        root = Path(scratch) / "root"
        debootstrap(root, packages, cache_dir() / "logs" / f"kind-{name}.log")
        _import(root, image, env)
    return image


def _import(root: Path, image: str, env: dict[str, str], *changes: str) -> None:
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    change_args = [f"--change={change}" for change in changes]
    _docker("import", *change_args, "-", image, env=env, stdin=tar.stdout)
    if tar.wait() != 0:
        raise RuntimeError(f"could not archive {root}")


def _build(image: str, dockerfile: str, files: dict[str, Path], env: dict[str, str]) -> None:
    """`docker build` of `dockerfile` with `files` (name in the context: file or directory)."""
    with tempfile.TemporaryDirectory(dir=cache_dir()) as context:
        for name, path in files.items():
            if path.is_dir():
                shutil.copytree(path, Path(context) / name)
            else:
                shutil.copy(path, Path(context) / name)
        (Path(context) / "Dockerfile").write_text(dockerfile)
        _docker("build", "--quiet", "--tag", image, context, env={**env, "DOCKER_BUILDKIT": "0"})


def _binary_image(image: str, binary: Path, entrypoint: str, env: dict[str, str]) -> None:
    """A static binary alone, at `entrypoint` (kubeadm's manifests name the command; PATH)."""
    dockerfile = (
        f"FROM scratch\nCOPY binary {entrypoint}\nENV PATH=/usr/local/bin:/usr/bin:/bin\n"
        f'ENTRYPOINT ["{entrypoint}"]\n'
    )
    _build(image, dockerfile, {"binary": binary}, env)


def _control_plane_images(tools: str, env: dict[str, str]) -> list[str]:
    """The images kubeadm and the node's pod network run, made from the pinned binaries."""
    binaries = {
        f"registry.k8s.io/{tool.name}:{KUBERNETES_VERSION}": (tool, f"/usr/local/bin/{tool.name}")
        for tool in (KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER)
    }
    binaries[ETCD_IMAGE] = (ETCD, "/usr/local/bin/etcd")
    binaries[COREDNS_IMAGE] = (COREDNS, "/coredns")
    binaries[PAUSE_IMAGE] = (PAUSE, "/pause")
    for image, (tool, entrypoint) in binaries.items():
        _binary_image(image, tool.ensure(), entrypoint, env)
    # kube-proxy calls iptables; the pod network's script, bash, ip and kubectl.
    proxy = f"registry.k8s.io/kube-proxy:{KUBERNETES_VERSION}"
    dockerfile = f"FROM {tools}\nCOPY binary /usr/local/bin/kube-proxy\n"
    _build(proxy, dockerfile, {"binary": KUBE_PROXY.ensure()}, env)
    _build(
        NETWORK_IMAGE,
        f"FROM {tools}\nCOPY binary /usr/bin/kubectl\n",
        {"binary": KUBECTL.ensure()},
        env,
    )
    return [*binaries, proxy, NETWORK_IMAGE]


def _node_files(root: Path) -> None:
    """The node's own files over the Debian tree at `root`."""
    node = KIND_DIR / "node"
    for tool, directory in ((KUBELET, "usr/bin"), (KUBEADM, "usr/bin"), (KUBECTL, "usr/bin")):
        shutil.copy(tool.ensure(), root / directory / tool.name)
    shutil.copy(RUNC_BOUNDED.ensure(), root / "usr/local/bin/runc-bounded")
    shutil.copy(node / "entrypoint", root / "usr/local/bin/entrypoint")
    (root / "etc/containerd").mkdir(exist_ok=True)
    shutil.copy(node / "config.toml", root / "etc/containerd/config.toml")
    units = root / "etc/systemd/system"
    shutil.copy(node / "kubelet.service", units / "kubelet.service")
    (units / "kubelet.service.d").mkdir(exist_ok=True)
    shutil.copy(node / "10-kubeadm.conf", units / "kubelet.service.d/10-kubeadm.conf")
    wants = units / "multi-user.target.wants"
    wants.mkdir(exist_ok=True)
    for unit in ("/etc/systemd/system/kubelet.service", "/lib/systemd/system/containerd.service"):
        link = wants / Path(unit).name
        link.unlink(missing_ok=True)
        link.symlink_to(unit)  # as the image sees it
    manifests = root / "kind/manifests"
    manifests.mkdir(parents=True)
    shutil.copy(node / "default-cni.yaml", manifests / "default-cni.yaml")
    (root / "kind/version").write_text(KUBERNETES_VERSION + "\n")
    (root / "etc/machine-id").write_text("")  # each node makes its own


def node_image(env: dict[str, str]) -> str:
    """The kind node image, made here (cached by a digest of what it is made from)."""
    node_files = sorted((KIND_DIR / "node").iterdir())
    tools = (KUBELET, KUBEADM, KUBECTL, RUNC_BOUNDED, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER,
             KUBE_SCHEDULER, KUBE_PROXY, ETCD, COREDNS, PAUSE)  # fmt: skip
    image = (
        "localhost/kind-node:"
        + KUBERNETES_VERSION
        + "-"
        + _digest(
            *NODE_PACKAGES, *(f.read_bytes() for f in node_files), *(str(t.path()) for t in tools)
        )
    )
    if _has_image(image, env):
        return image
    base = _debian_image("node-base", NODE_PACKAGES, env)
    progress(f"making the kind node image {image} (first run only)")
    preloaded = _control_plane_images(base, env)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        root = Path(scratch) / "root"
        container = _docker("create", base, "true", env=env).strip()
        try:
            root.mkdir()
            exported = subprocess.Popen(
                ["docker", "export", container], env=env, stdout=subprocess.PIPE
            )
            subprocess.run(["tar", "-C", str(root), "-x"], stdin=exported.stdout, check=True)
            exported.wait()
        finally:
            _docker("rm", container, env=env)
        _node_files(root)
        unloaded = f"{image}-unloaded"
        _import(
            root, unloaded, env, 'ENTRYPOINT ["/usr/local/bin/entrypoint"]', "ENV container=docker"
        )
    with _running(unloaded, env) as node:
        images = subprocess.Popen(["docker", "save", *preloaded], env=env, stdout=subprocess.PIPE)
        _docker(
            "exec", "-i", node, "ctr", "--namespace=k8s.io", "images", "import", "--no-unpack",
            "--digests", "-", env=env, stdin=images.stdout,
        )  # fmt: skip
        images.wait()
        # The import is committed (containerd's metadata is a bolt database): stopping the
        # node as a whole loses nothing of it.
        _docker("exec", node, "truncate", "--size=0", "/etc/machine-id", env=env)
        _docker("stop", "--time=10", node, env=env)
        _docker(
            "commit", '--change=ENTRYPOINT ["/usr/local/bin/entrypoint"]',
            "--change=ENV container=docker", node, image, env=env,
        )  # fmt: skip
    _docker("rmi", unloaded, env=env)
    for other in _docker("images", "--format={{.Repository}}:{{.Tag}}", env=env).split():
        if other.startswith("localhost/kind-node:") and other != image:
            _docker("rmi", other, env=env)  # made from older inputs
    return image


@contextmanager
def _running(image: str, env: dict[str, str]) -> Iterator[str]:
    """A node container of `image`, privileged as kind runs it, until its containerd answers."""
    name = f"kind-node-build-{os.getpid()}"
    _docker(
        "run", "--detach", f"--name={name}", "--privileged", "--security-opt=seccomp=unconfined",
        "--tmpfs=/tmp", "--tmpfs=/run", "--volume=/lib/modules:/lib/modules:ro", image, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + ENGINE_START_SECONDS
        while subprocess.run(
            ["docker", "exec", name, "ctr", "version"], env=env, capture_output=True
        ).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node's containerd did not start in {name}")
            time.sleep(0.5)
        yield name
    finally:
        subprocess.run(["docker", "rm", "--force", name], env=env, capture_output=True)


def kafka_image(env: dict[str, str]) -> None:
    """apache/kafka's stand-in, under its name: a Java runtime, the dev stack's Kafka jars and a
    start script that reads the same KAFKA_* variables (dev/kind/kafka-image/start-kafka)."""
    files = {name: KIND_DIR / "kafka-image" / name for name in ("start-kafka", "log4j2.properties")}
    libs = kafka_libs()
    made = "localhost/kind-kafka:" + _digest(
        *KAFKA_PACKAGES, str(libs), *(path.read_bytes() for path in files.values())
    )
    if not _has_image(made, env):
        base = _debian_image("kafka-base", KAFKA_PACKAGES, env)
        dockerfile = (
            f"FROM {base}\nCOPY libs /opt/kafka/libs\n"
            "COPY start-kafka log4j2.properties /opt/kafka/\n"
            'USER 1000:1000\nENTRYPOINT ["/opt/kafka/start-kafka"]\n'
        )
        _build(made, dockerfile, {**files, "libs": libs}, env)
    _docker("tag", made, KAFKA_IMAGE, env=env)


def load_project_images(env: dict[str, str]) -> None:
    """The project's images (built with buildah, images.py) into Docker as e2e.sh names them."""
    built = project_images()
    for source, name in zip((built.operator, built.audit), E2E_IMAGES, strict=True):
        with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
            archive = Path(scratch) / "image.tar"
            _buildah("push", "--quiet", source, f"docker-archive:{archive}:{name}")
            _docker("load", "--quiet", f"--input={archive}", env=env)
        if _has_image(source, env):  # the archive names it too: only e2e.sh's name is needed
            _docker("rmi", source, env=env)
    _docker("image", "prune", "--force", env=env)  # the images the names were on before


def tools_path() -> str:
    """A PATH with kind, kubectl and Helm (pinned) first."""
    directory = cache_dir() / "kind" / "bin"
    directory.mkdir(parents=True, exist_ok=True)
    for tool in (KIND, KUBECTL, HELM):
        link = directory / tool.name
        link.unlink(missing_ok=True)
        link.symlink_to(tool.ensure())
    return f"{directory}:{os.environ['PATH']}"


def main() -> int:
    env = {**os.environ, "PATH": tools_path()}
    engine: PrivateEngine | None = None
    if not _answers(env):
        engine = PrivateEngine()
        if not _answers(engine.env):  # else still running after KEEP_CLUSTER=1
            engine.start()
        env = {**engine.env, "PATH": env["PATH"]}
    keep = os.environ.get("KEEP_CLUSTER") == "1"
    try:
        if engine is not None:  # no registry either: what it would serve, made here
            env["KIND_NODE_IMAGE"] = node_image(env)
            kafka_image(env)
            load_project_images(env)
            env["SKIP_IMAGE_BUILD"] = "1"
        return subprocess.run(["bash", str(E2E_SCRIPT)], env=env, cwd=REPO_ROOT).returncode
    finally:
        if engine is not None and keep:
            progress(f"the cluster's engine keeps running: DOCKER_HOST={env['DOCKER_HOST']}")
        elif engine is not None:
            # kind leaves its network (a bridge on the host) when it deletes the cluster.
            subprocess.run(["docker", "network", "rm", "kind"], env=env, capture_output=True)
            engine.stop()


if __name__ == "__main__":
    sys.exit(main())
