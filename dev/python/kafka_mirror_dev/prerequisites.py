"""What the dev stack's real node needs from the machine (node.py): Linux, root, and a
few Debian packages, which it installs with apt-get when they are missing, as the rest of the dev
stack installs its parts; elsewhere the reason it cannot run, with the fix."""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from kafka_mirror.render import WORKER_ENV
from kafka_mirror_dev.builds import REPO_ROOT, MissingPrerequisite, progress
from kafka_mirror_dev.containerd import CNI_BIN_DIR

# What the node runs, by the Debian package that brings it (apt-get installs the missing ones),
# and gdb, which reads the core a crashed operator or worker leaves (`ChildProcess.native_stacks`).
PACKAGES = {
    "gdb": "gdb",
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    f"{CNI_BIN_DIR}/bridge": "containernetworking-plugins",
    "iptables": "iptables",
    "buildah": "buildah",
    "debootstrap": "debootstrap",
}

ALLOCATOR, ALLOCATOR_PACKAGE = "mimalloc", "libmimalloc2.0"  # render.WORKER_ENV's, by Debian


def _missing_packages() -> list[str]:
    missing = {
        package
        for command, package in PACKAGES.items()
        if not (Path(command).exists() if command.startswith("/") else shutil.which(command))
    }
    return sorted(missing)


def unavailable_reason() -> str | None:
    """Why no node can run on this machine, or None when one can."""
    if sys.platform != "linux":
        return "a node needs Linux (containers, a bridge, iptables)"
    if os.geteuid() != 0:
        return "a node needs root (containerd, the pods' bridge, iptables, cgroups)"
    missing = _missing_packages()
    if missing and not shutil.which("apt-get"):
        return f"a node needs {', '.join(missing)}: install them with your package manager"
    return None


def install_prerequisites() -> None:
    """Install the Debian packages the node needs and lacks (first run only)."""
    if reason := unavailable_reason():
        raise MissingPrerequisite(reason)
    missing = _missing_packages()
    if missing:
        _apt_install(missing)


def worker_env(install: bool = False) -> dict[str, str]:
    """What a worker pod adds to the environment of its processes (`render.WORKER_ENV`: the
    allocator it preloads), when this machine has that library; else nothing (glibc's). With
    `install` (the benchmarks, which measure the worker as its pod runs it), apt-get installs it
    first where it is missing."""
    if ctypes.util.find_library(ALLOCATOR) is None:
        if not install:
            return {}
        if sys.platform != "linux" or os.geteuid() != 0 or not shutil.which("apt-get"):
            raise MissingPrerequisite(f"install {ALLOCATOR_PACKAGE} (the worker's allocator)")
        _apt_install([ALLOCATOR_PACKAGE])
    return dict(WORKER_ENV)


def _apt_install(missing: list[str]) -> None:
    progress(f"installing {' '.join(missing)} with apt-get (first run only)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-y", "--no-install-recommends"]
    for command in (["apt-get", "-q", "update"], [*apt, "install", *missing]):
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise MissingPrerequisite(
                f"`{' '.join(command)}` failed; install {' '.join(missing)} by hand:\n"
                + result.stdout[-2000:]
                + result.stderr[-2000:]
            )


def uncompiled_hot_path() -> str | None:
    """What is wrong with this checkout's compiled hot path (the modules setup.py compiles), or
    None: a module not compiled, or edited since, would have the tests and benchmarks run other
    code than the image's."""
    setup = (REPO_ROOT / "setup.py").read_text()
    for source in (REPO_ROOT / path for path in re.findall(r'"(operator/[\w/]+\.py)"', setup)):
        compiled = list(source.parent.glob(f"{source.stem}.cpython-*.so"))
        if not compiled or min(c.stat().st_mtime for c in compiled) < source.stat().st_mtime:
            where = source.relative_to(REPO_ROOT)
            return f"{where} is not compiled, or changed since: `make unit` compiles it (setup.py)"
    return None
