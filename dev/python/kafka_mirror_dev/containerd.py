"""The node's own containerd (not the machine's, if it has one): its configuration, root, state
and socket, with the CRI plugin the kubelet talks to, runc, and the CNI configuration."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from kafka_mirror_dev.builds import progress
from kafka_mirror_dev.processes import ServerProcess, stop_pid

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
CRI_NAMESPACE = "k8s.io"  # where the CRI plugin keeps images and containers


def cni_config(bridge: str, subnet: str, gateway: str, ipam_dir: Path) -> dict[str, object]:
    """One bridge network for the pods: host-local addresses, the gateway on the bridge (the
    host's address for pods), no masquerading, since pod traffic stays on the machine."""
    return {
        "cniVersion": "1.0.0",
        "name": "kafka-mirror-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
        ],
    }


@dataclass
class Containerd:
    """containerd with `root` (images, kept across runs: the cache) and `workdir` (state,
    socket, configuration, log: one run's)."""

    root: Path
    workdir: Path
    sandbox_image: str
    process: ServerProcess | None = None

    def __post_init__(self) -> None:
        self.socket = self.workdir / "containerd.sock"
        self.endpoint = f"unix://{self.socket}"
        self.state = self.workdir / "state"
        self.cni_conf_dir = self.workdir / "cni"

    def _config(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{self.root}"
state = "{self.state}"

[grpc]
  address = "{self.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{self.root / "opt"}"

[{cri}]
  sandbox_image = "{self.sandbox_image}"
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower the sandbox's oom_score_adj, and
  # every pod would fail ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{self.cni_conf_dir}"
"""

    def start(self, network: dict[str, object], timeout: float = 60.0) -> None:
        for directory in (self.root, self.state, self.cni_conf_dir):
            directory.mkdir(parents=True, exist_ok=True)
        (self.cni_conf_dir / "10-kafka-mirror.conflist").write_text(json.dumps(network, indent=2))
        config = self.workdir / "containerd.toml"
        config.write_text(self._config())
        self.process = ServerProcess(
            "containerd",
            ["containerd", "--config", str(config), "--log-level", "warn"],
            self.workdir / "containerd.log",
        )
        self.process.start()
        self.process.wait_until(self._serving, timeout, "serving")

    def ctr(self, *args: str) -> str:
        """`ctr` on this containerd, in the CRI plugin's namespace."""
        command = ["ctr", "--address", str(self.socket), "--namespace", CRI_NAMESPACE, *args]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
        return result.stdout

    def _serving(self) -> bool:
        try:
            self.ctr("version")
        except RuntimeError:
            return False
        return True

    def has_image(self, name: str) -> bool:
        return name in self.ctr("images", "list", "--quiet").split()

    def import_image(self, archive: Path) -> None:
        """Import (and unpack for the CRI plugin) a `docker save` style archive; its tags name
        the images."""
        self.ctr("images", "import", str(archive))

    def keep_only(self, images: Collection[str]) -> None:
        """Remove every image but `images` (older builds), with the references the CRI plugin
        adds to each (by digest and by ID), and collect their content and layers now."""
        targets = {}  # reference → the manifest it names
        for line in self.ctr("images", "list").splitlines()[1:]:
            reference, _, digest = line.split()[:3]
            targets[reference] = digest
        kept = {targets[image] for image in images}
        stale = [reference for reference, digest in targets.items() if digest not in kept]
        if stale:
            self.ctr("images", "remove", "--sync", *stale)

    def remove_containers(self) -> None:
        """Forget every container and its writable layer, once the kubelet has stopped: the
        store outlives the run, and a stopped pod's record would keep its image's layers from
        ever being collected."""
        for task in self.ctr("tasks", "list", "--quiet").split():
            self.ctr("tasks", "delete", "--force", task)
        containers = self.ctr("containers", "list", "--quiet").split()
        if containers:
            self.ctr("containers", "delete", *containers)

    def _shims(self) -> list[int]:
        """The runc shims this containerd started: they outlive it by design."""
        address = str(self.socket).encode()
        pids = []
        for process in Path("/proc").glob("[0-9]*"):
            try:
                command = (process / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if command[0].endswith(b"containerd-shim-runc-v2") and address in command:
                pids.append(int(process.name))
        return pids

    def stop(self) -> None:
        if self.process is not None:
            try:
                self.remove_containers()
            except RuntimeError as error:  # containerd itself failed: nothing to keep tidy
                progress(f"containers not removed: {error}")
            self.process.stop()
        self.stop_shims()

    def stop_shims(self) -> None:
        for pid in self._shims():
            stop_pid(pid)
