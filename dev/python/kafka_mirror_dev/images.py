"""The node's images, made here without an image registry, and cached.

- the pod sandbox ("pause"): our own static binary (dev/go/pause) in an empty image;
- the bases of the Dockerfile: a Debian bookworm with Python 3.11 made with debootstrap from
  Debian's packages (for `python:3.11-slim-bookworm`), and Spark's Kafka jars as the dev stack
  resolved them (kafka_mirror_dev.builds.spark_kafka_jars, for the Maven stage);
- the project's two images, the Dockerfile's targets `operator` and `audit`, built with those
  bases as build arguments.

Buildah builds them: it needs no daemon (so no socket, bridge or iptables rules of its own) and
writes a `docker save` style archive that the node's containerd imports. Its store is in the
cache; each image's tag is a hash of what it is made from, so an unchanged input is not built
again, and the project's images are rebuilt when the package (the files the Dockerfile copies)
changes.
"""

from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kafka_mirror_dev.builds import (
    PAUSE,
    REPO_ROOT,
    cache_dir,
    locked,
    progress,
    require,
    spark_kafka_jars,
)
from kafka_mirror_dev.containerd import Containerd

SUITE = "bookworm"  # python:3.11-slim-bookworm's Debian; its python3 is 3.11
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
VENV = "/opt/python"
BASE_PATH = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The CAs this machine trusts beyond Debian's (a TLS proxy in front of the package registries,
# say): the build's pip and apt must trust them too.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
# The Dockerfile's two targets, as the chart names them: the audit image is the operator
# image's repository with `-audit`, same tag.
PROJECT_REPOSITORY = "localhost/kafka-mirror-operator"
AUDIT_SUFFIX = "-audit"


def _digest(*parts: bytes | str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def _buildah_command(*args: str) -> list[str]:
    store = cache_dir() / "images"
    return [
        "buildah",
        f"--root={store / 'storage'}",
        f"--runroot={store / 'run'}",
        "--storage-driver=overlay",
        *args,
    ]


def _run(command: list[str], log: Path | None = None) -> str:
    """Run `command`; its output, or (with `log`) nothing, the output going to the log."""
    if log is None:
        result = subprocess.run(command, capture_output=True, text=True)
        failure = result.stderr
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        failure = "".join(log.read_text().splitlines(keepends=True)[-30:])
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed:\n{failure}")
    return result.stdout or ""


def _buildah(*args: str, log: Path | None = None) -> str:
    return _run(_buildah_command(*args), log).strip()


# buildah runs each RUN step by re-executing itself (containers/storage's pkg/unshare): it copies
# its own binary into a memfd and seals it, and the kernel refuses the write seal (EBUSY) while
# any page of the copy is still referenced beyond its mapping (seen once in a first build, a
# newcomer's `make demo`: the pages just written, still held by the kernel). Not ours to fix;
# the build is made again, from buildah's cache of the steps done.
REEXEC_SEAL_FAILURE = "sealing memfd copy: Device or resource busy"
BUILD_ATTEMPTS = 3


def _run_again_on_seal_failure(command: list[str], log: Path, what: str) -> None:
    """`_run(command, log)`, made again (up to BUILD_ATTEMPTS) where buildah's re-exec could
    not seal its copy of itself, saying so; any other failure at once."""
    for attempt in range(1, BUILD_ATTEMPTS + 1):
        try:
            _run(command, log)
            return
        except RuntimeError:
            if attempt == BUILD_ATTEMPTS or REEXEC_SEAL_FAILURE not in log.read_text():
                raise
            progress(
                f"building {what} again (attempt {attempt + 1} of {BUILD_ATTEMPTS}): buildah "
                f"could not seal its memfd copy of itself ({REEXEC_SEAL_FAILURE}), a "
                "passing kernel refusal"
            )


def _has(image: str) -> bool:
    inspect = _buildah_command("inspect", "--type=image", image)
    return subprocess.run(inspect, capture_output=True).returncode == 0


def _log(name: str) -> Path:
    return cache_dir() / "logs" / f"image-{name}.log"


def _ensure(image: str, what: str, make: Callable[[], None]) -> str:
    """`image`, made by `make` unless the store has it (once, under a lock)."""
    if _has(image):
        return image
    with locked("images"):
        if not _has(image):
            progress(f"making {what} (first run only)")
            started = time.monotonic()
            make()
            progress(f"made {what} in {time.monotonic() - started:.0f}s: {image}")
    return image


@contextmanager
def _container(image: str) -> Iterator[str]:
    """A working container from `image` ("scratch": empty), removed afterwards."""
    container = _buildah("from", "--quiet", image)
    try:
        yield container
    finally:
        _buildah("rm", container)


def pause_image() -> str:
    binary = PAUSE.ensure()
    image = f"localhost/kafka-mirror/pause:{binary.name.rsplit('-', 1)[1]}"

    def make() -> None:
        with _container("scratch") as container:
            _buildah("copy", container, str(binary), "/pause")
            _buildah("config", "--entrypoint", '["/pause"]', container)
            _buildah("commit", "--quiet", container, image)

    return _ensure(image, "the pod sandbox image", make)


def debootstrap(root: Path, packages: tuple[str, ...], log: Path) -> None:
    """A minimal Debian `SUITE` with `packages` at `root`, without apt's caches."""
    include = f"--include={','.join(packages)}"
    command = [require("debootstrap"), "--variant=minbase", include, SUITE, str(root)]
    _run(command, log=log)
    for cache in ("var/lib/apt/lists", "var/cache/apt/archives"):
        shutil.rmtree(root / cache, ignore_errors=True)


def python_base() -> str:
    """The runtime's base: Debian with Python 3.11 and a virtual environment first on PATH
    (python:3.11-slim's `pip` installs into its own Python; Debian's system pip refuses to,
    PEP 668)."""
    cas = sorted(LOCAL_CAS.glob("*.crt"))
    image = "localhost/kafka-mirror/python-base:" + _digest(
        SUITE, *BASE_PACKAGES, BASE_PATH, *(ca.read_bytes() for ca in cas)
    )

    def make() -> None:
        with _container("scratch") as container:
            root = Path(_buildah("mount", container))
            debootstrap(root, BASE_PACKAGES, _log("python-base"))
            for ca in cas:
                shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
            _run(["chroot", str(root), "update-ca-certificates"])
            # pip reads its CAs from its own bundle, not the system's.
            (root / "etc/pip.conf").write_text(
                "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"
            )
            _run(["chroot", str(root), "python3", "-m", "venv", VENV])
            _buildah("config", f"--env=PATH={BASE_PATH}", "--env=LANG=C.UTF-8", container)
            _buildah("config", "--cmd=python3", container)
            _buildah("commit", "--quiet", container, image)

    return _ensure(image, f"a Debian {SUITE} Python base with debootstrap", make)


def spark_jars_image() -> str:
    """Spark's Kafka source and its jars in /jars, as the dev stack resolved them."""
    jars = spark_kafka_jars()
    image = "localhost/kafka-mirror/spark-jars:" + _digest(*(jar.name for jar in jars))

    def make() -> None:
        with _container("scratch") as container:
            _buildah("copy", container, *(str(jar) for jar in jars), "/jars/")
            _buildah("commit", "--quiet", container, image)

    return _ensure(image, "the Spark jars image", make)


def context_files() -> list[Path]:
    """The files the Dockerfile may copy: what .dockerignore lets through, less bytecode and
    compiled modules."""
    allowed = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    files: list[Path] = []
    for entry in (line[1:].rstrip("/") for line in allowed if line.startswith("!")):
        path = REPO_ROOT / entry
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [
            p
            for p in found
            if p.suffix not in (".pyc", ".so")
            and not any(part == "__pycache__" or part.endswith(".egg-info") for part in p.parts)
        ]
    return files


def _build_target(target: str, image: str, bases: dict[str, str]) -> None:
    """One target of the Dockerfile, tagged `image`; older builds of its repository removed."""
    bud = _buildah_command(
        "bud",
        # RUN steps as chroot processes on the host's network: no runc, cgroups or network
        # namespace of buildah's own, and the package registries as the host reaches them.
        "--isolation=chroot",
        "--network=host",
        *(f"--build-arg={name}={value}" for name, value in bases.items()),
        f"--target={target}",
        f"--tag={image}",
        f"--file={REPO_ROOT / 'Dockerfile'}",
        str(REPO_ROOT),
    )
    _run_again_on_seal_failure(bud, _log(f"project-{target}"), f"the {target} image")
    # buildah leaves the containers of the stages it copied from (still mounted).
    _buildah("rm", "--all")
    repository = image.rsplit(":", 1)[0]
    for other in _buildah("images", "--format={{.Name}}:{{.Tag}}").splitlines():
        if other.rsplit(":", 1)[0] == repository and other != image:
            _buildah("rmi", other)  # built from an older package
    if target == "operator":  # the last: the stages the audit's left were its cache
        _buildah("rmi", "--prune")


@dataclass(frozen=True)
class ProjectImages:
    """The project's images, one tag for both: the operator and workers', and the audit's."""

    operator: str
    audit: str


def project_images() -> ProjectImages:
    """The project's images, built from the Dockerfile's two targets on the local bases."""
    bases = {"PYTHON_IMAGE": python_base(), "SPARK_JARS": spark_jars_image()}
    files = [REPO_ROOT / "Dockerfile", REPO_ROOT / ".dockerignore", *context_files()]
    inputs = [part for f in files for part in (str(f.relative_to(REPO_ROOT)), f.read_bytes())]
    tag = f"dev-{_digest(*bases.values(), *inputs)}"
    built = ProjectImages(
        f"{PROJECT_REPOSITORY}:{tag}", f"{PROJECT_REPOSITORY}{AUDIT_SUFFIX}:{tag}"
    )
    # The audit's first: the operator's target then reuses its wheel stage from the cache.
    for target, image in (("audit", built.audit), ("operator", built.operator)):
        make = functools.partial(_build_target, target, image, bases)
        _ensure(image, f"the project's {target} image from the Dockerfile", make)
    return built


def load(containerd: Containerd, image: str) -> None:
    """Put `image` into the node's image store (unless it is there), through an archive."""
    if containerd.has_image(image):
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as scratch:
        archive = Path(scratch) / "image.tar"
        _buildah("push", "--quiet", image, f"docker-archive:{archive}:{image}")
        containerd.import_image(archive)
    progress(f"loaded {image} into the node's containerd in {time.monotonic() - started:.0f}s")
