"""The shipping files, linted and checked against the code they ship: the Dockerfile, the kind
end-to-end test (dev/kind/, kind-config.yaml) and its GitHub workflow. Nothing here runs a
container: the machines that run the unit tests have no container engine."""

from __future__ import annotations

import argparse
import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror.api.models import GROUP, KafkaMirrorSpec
from kafka_mirror.audit.spark import JARS_ENV
from kafka_mirror.cli import parser
from kafka_mirror.render import build_deployment, build_worker_config
from kafka_mirror.render_audit import build_audit_cronjob
from kafka_mirror_dev import kind
from kafka_mirror_dev.builds import ACTIONLINT

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # where the dev extra's linters (shellcheck, hadolint) land
KIND_DIR = REPO / "dev" / "kind"
E2E_SCRIPT = KIND_DIR / "e2e.sh"
NODE_DIR = KIND_DIR / "node"  # kind's node image as kafka_mirror_dev/kind.py makes it
# The node's entrypoint and Kafka's image's start script are bash scripts too.
SCRIPTS = sorted(
    [*KIND_DIR.glob("*.sh"), NODE_DIR / "entrypoint", KIND_DIR / "kafka-image" / "start-kafka"]
)
MANIFESTS = sorted([*KIND_DIR.glob("*.yaml"), NODE_DIR / "default-cni.yaml"])
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yaml"))
DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CHART_VALUES = yaml.safe_load(
    (REPO / "charts" / "kafka-mirror-operator" / "values.yaml").read_text()
)
EXAMPLE = yaml.safe_load((REPO / "examples" / "kafkamirror-a-to-b.yaml").read_text())
CLI = "kafka-mirror"
IMAGE_PLACEHOLDER = "KAFKA_MIRROR_IMAGE"  # dev/kind/smoke-job.yaml's image, replaced by e2e.sh


# --- helpers ----------------------------------------------------------------------------------


def _linter(name: str) -> Path:
    """A linter the dev extra installs next to the venv's python."""
    beside = BIN / name
    if not beside.exists():
        pytest.fail(f"{name} is missing: it comes with the dev extra, pip install -e '.[dev]'")
    return beside


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv], cwd=REPO, capture_output=True, text=True, check=False
    )


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _object(kind: str, name: str) -> dict[str, Any]:
    """The one object of this kind and name across dev/kind/*.yaml."""
    found = [
        doc
        for path in MANIFESTS
        for doc in _documents(path)
        if doc["kind"] == kind and doc["metadata"]["name"] == name
    ]
    assert len(found) == 1, f"{len(found)} {kind} {name} in dev/kind/"
    return found[0]


def _values(tree: Any, key: str) -> Iterator[Any]:
    """Every value of `key` anywhere in a nested structure."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key:
                yield v
            yield from _values(v, key)
    elif isinstance(tree, list):
        for item in tree:
            yield from _values(item, key)


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments): continuation lines joined, comments dropped."""
    instructions, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        keyword, _, arguments = (current + stripped).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        current = ""
    return instructions


def _stages() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Each named stage: the image it starts from, and its instructions."""
    stages: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, arguments in _instructions():
        if keyword == "FROM":
            base, _, name = arguments.partition(" AS ")
            current = []
            stages[name.strip()] = (base.strip(), current)
        else:
            current.append((keyword, arguments))
    return stages


def _image(target: str) -> list[tuple[str, str]]:
    """What builds one of the images (a target), its parent stages' instructions first."""
    stages, chain = _stages(), []
    while target in stages:
        base, instructions = stages[target]
        chain = instructions + chain
        target = base
    return chain


# The images: the operator's and workers' (the default target, the last stage) and the audit's.
IMAGES = ("operator", "audit")


def _env(target: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, arguments in _image(target):
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(arguments))
    return env


def _copies(stage: list[tuple[str, str]]) -> list[tuple[dict[str, str], list[str], str]]:
    """COPY instructions as (flags, sources, destination)."""
    copies = []
    for keyword, arguments in stage:
        if keyword == "COPY":
            words = shlex.split(arguments)
            flags = dict(w[2:].split("=", 1) for w in words if w.startswith("--"))
            paths = [w for w in words if not w.startswith("--")]
            copies.append((flags, paths[:-1], paths[-1]))
    return copies


def _dockerignored(path: str) -> bool:
    """Whether .dockerignore leaves `path` out of the build context: the last matching pattern
    decides, and a pattern that matches a parent directory matches the path (Docker's rules,
    enough of them for the patterns used here)."""
    parts = path.strip("/").split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for line in (REPO / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negated = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates):
            ignored = not negated
    return ignored


def _script_variable(name: str) -> str:
    match = re.search(rf"^{name}=(\S+)", E2E_SCRIPT.read_text(), re.MULTILINE)
    assert match, f"{name}= not set in {E2E_SCRIPT.name}"
    return match[1]


def _subcommands() -> set[str]:
    actions = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(actions[0].choices)


def _containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for containers in _values(document, "containers") for c in containers]


# --- the linters ------------------------------------------------------------------------------


def test_the_shipping_files_exist() -> None:
    assert DOCKERFILE.exists()
    assert E2E_SCRIPT in SCRIPTS
    assert {p.name for p in MANIFESTS} >= {"kafka.yaml", "smoke-job.yaml"}
    assert REPO / ".github" / "workflows" / "kind-e2e.yaml" in WORKFLOWS


def test_the_scripts_pass_shellcheck() -> None:
    result = _run(_linter("shellcheck"), "--external-sources", *SCRIPTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflows_pass_actionlint() -> None:
    actionlint = ACTIONLINT.ensure()  # built from its Go module, as Helm is
    shellcheck = BIN / "shellcheck"  # actionlint checks the `run:` scripts with it
    options = ["-shellcheck", str(shellcheck)] if shellcheck.exists() else []
    result = _run(actionlint, "-no-color", *options, *WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dockerfile_passes_hadolint() -> None:
    result = _run(_linter("hadolint"), "--no-color", DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the Dockerfile against the code ----------------------------------------------------------


@pytest.mark.parametrize("target", IMAGES)
def test_the_image_user_is_numeric_and_not_root(target: str) -> None:
    users = [arguments for keyword, arguments in _image(target) if keyword == "USER"]
    assert users, "the image would run as root"
    # Numeric, or the kubelet cannot verify runAsNonRoot and refuses to start the pod.
    match = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1])
    assert match, f"USER {users[-1]} is not numeric"
    assert int(match[1]) != 0
    assert int(match[1]) == CHART_VALUES["podSecurityContext"]["runAsUser"]


@pytest.mark.parametrize("target", IMAGES)
def test_every_uid_the_pods_run_as_has_a_name_in_the_image(target: str) -> None:
    """Java takes user.home from /etc/passwd and Hadoop's login in Spark fails for a nameless uid,
    so each uid a pod of this project runs as needs a useradd in the image."""
    spec = KafkaMirrorSpec.model_validate(EXAMPLE["spec"])
    _, envs = build_worker_config("ns", "m", spec, [])
    rendered = [
        build_deployment("ns", "m", spec, envs, "checksum"),
        build_audit_cronjob("ns", "m", spec, envs),
    ]
    uids = {CHART_VALUES["podSecurityContext"]["runAsUser"]}
    uids |= {uid for obj in rendered for uid in _values(obj, "runAsUser")}
    uids |= {
        uid for path in MANIFESTS for doc in _documents(path) for uid in _values(doc, "runAsUser")
    }
    runs = " ".join(arguments for keyword, arguments in _image(target) if keyword == "RUN")
    named = {int(uid) for uid in re.findall(r"useradd [^&;]*--uid (\d+)", runs)}
    assert uids <= named, f"no user in the image for uid {sorted(uids - named)}"


def test_the_spark_jars_are_where_the_audit_looks() -> None:
    jars = _env("audit").get(JARS_ENV)
    assert jars, f"the image does not set {JARS_ENV}"
    copied = [
        (flags, sources, dest)
        for flags, sources, dest in _copies(_image("audit"))
        if flags.get("from") == "spark-jars"
    ]
    assert [dest.rstrip("/") for _, _, dest in copied] == [jars.rstrip("/")]
    # ... and they are what the Maven stage wrote.
    maven = " ".join(arguments for keyword, arguments in _instructions() if keyword == "RUN")
    output = re.search(r"-DoutputDirectory=(\S+)", maven)
    assert output and [sources for _, sources, _ in copied] == [[output[1].rstrip("/") + "/"]]


def test_the_image_builds_the_project_from_what_it_copies() -> None:
    project = PYPROJECT["project"]
    sources = {
        source.rstrip("/")
        for flags, copied, _ in _copies(_instructions())
        if "from" not in flags  # from the build context, in either stage
        for source in copied
    }
    needed = {
        "pyproject.toml",
        project["readme"],
        *PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"],
    }
    assert needed <= sources
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such file"
        assert not _dockerignored(source), f".dockerignore leaves out {source}"
    assert _env("audit")["JAVA_HOME"]
    for target in IMAGES:
        assert _env(target)["HOME"] == "/tmp"  # /tmp: the pods' writable emptyDir
        entrypoint = [yaml.safe_load(a) for k, a in _image(target) if k == "ENTRYPOINT"]
        assert entrypoint == [[CLI]] and CLI in project["scripts"]
    # The default target (what `docker build .` makes) is the operator's and workers' image,
    # which carries neither Java nor Spark; only the audit's installs PySpark.
    assert list(_stages())[-1] == "operator"
    assert "JAVA_HOME" not in _env("operator") and JARS_ENV not in _env("operator")
    installs = {t: " ".join(a for k, a in _image(t) if k == "RUN") for t in IMAGES}
    assert "[audit]" in installs["audit"] and "[audit]" not in installs["operator"]
    version = re.search(r"^ARG VERSION=(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert version and version[1] == project["version"]


# --- the kind end-to-end test -----------------------------------------------------------------


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_the_kind_manifests_are_kubernetes_objects(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for doc in documents:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), doc
        assert doc.get("metadata", {}).get("name"), doc


def test_every_kafka_mirror_command_exists_in_the_cli() -> None:
    commands = [
        [*container["command"][1:], *container.get("args", [])]
        for path in MANIFESTS
        for doc in _documents(path)
        for container in _containers(doc)
        if container.get("command", [None])[0] == CLI
    ]
    assert commands, "no `kafka-mirror` container in dev/kind/"
    for argv in commands:
        try:
            parser().parse_args(argv)  # the subcommand, its options and required values
        except SystemExit:
            pytest.fail(f"`kafka-mirror {shlex.join(argv)}` does not parse")
    # The script, where it runs the CLI itself (`kafka-mirror` in command position).
    invoked = re.findall(
        rf"(?:^|[;&|(]|\$\()\s*{CLI}\s+([a-z][a-z-]*)", E2E_SCRIPT.read_text(), re.MULTILINE
    )
    assert set(invoked) <= _subcommands()


def test_the_smoke_job_checks_the_example_with_least_privilege() -> None:
    job = _object("Job", "kafka-mirror-smoke")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = parser().parse_args(container["command"][1:] + container["args"])
    namespace = job["metadata"]["namespace"]
    assert args.command == "smoke" and args.namespace == namespace
    assert namespace == _script_variable("NAMESPACE")
    assert args.mirror == EXAMPLE["metadata"]["name"] == _script_variable("MIRROR")
    assert args.source_bootstrap == EXAMPLE["spec"]["source"]["bootstrapServers"]
    assert args.target_bootstrap == EXAMPLE["spec"]["target"]["bootstrapServers"]
    assert job["spec"]["backoffLimit"] == 0
    assert container["image"] == IMAGE_PLACEHOLDER and IMAGE_PLACEHOLDER in E2E_SCRIPT.read_text()
    # The same hardening as the chart's pods: non-root, read-only root, /tmp an emptyDir.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}
    # Its ServiceAccount may read KafkaMirrors, nothing else.
    account = pod["serviceAccountName"]
    _object("ServiceAccount", account)
    binding = _object("RoleBinding", account)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    ]
    role = _object("Role", binding["roleRef"]["name"])
    assert role["rules"] == [
        {"apiGroups": [GROUP], "resources": ["kafkamirrors"], "verbs": ["get", "list", "watch"]}
    ]


@pytest.mark.parametrize("side", ["source", "target"])
def test_kafka_serves_the_example_addresses(side: str) -> None:
    bootstrap = EXAMPLE["spec"][side]["bootstrapServers"]
    host, port = bootstrap.rsplit(":", 1)
    name, namespace = host.split(".")[:2]
    service = _object("Service", name)
    assert service["metadata"]["namespace"] == namespace
    assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    deployment = _object("Deployment", name)
    assert (
        deployment["spec"]["template"]["metadata"]["labels"].items()
        >= service["spec"]["selector"].items()
    )
    (kafka,) = _containers(deployment)
    env = {e["name"]: e["value"] for e in kafka["env"]}
    # Clients reconnect to the advertised address: it must be the Service's.
    assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{bootstrap}"
    # The image reads every KAFKA_* variable as a setting; service links would add some.
    assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_kind_config_names_the_scripts_cluster_and_pins_its_nodes() -> None:
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    assert config["name"] == _script_variable("CLUSTER")
    images = {node.get("image") for node in config["nodes"]}
    assert len(images) == 1 and re.fullmatch(
        r"kindest/node:v\d+\.\d+\.\d+@sha256:[0-9a-f]{64}", images.pop() or ""
    ), "every node should run the same kindest/node image, pinned by digest"


def test_make_and_the_workflow_run_the_script() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.MULTILINE)
    assert phony and "kind-e2e" in phony[1].split()
    recipe = re.search(r"^kind-e2e:.*\n\t(.*)$", makefile, re.MULTILINE)
    assert recipe and recipe[1] == "$(BIN)/python -m kafka_mirror_dev.kind"
    assert kind.E2E_SCRIPT == E2E_SCRIPT  # what the target runs, after what it brings
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "kind-e2e.yaml").read_text())
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert f"bash {E2E_SCRIPT.relative_to(REPO)}" in runs


def test_the_node_image_runs_the_images_it_preloads() -> None:
    """The node's containerd, its pod network and kind-config.yaml agree with kind.py."""
    containerd = tomllib.loads((NODE_DIR / "config.toml").read_text())
    cri = containerd["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == kind.PAUSE_IMAGE
    runc = cri["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is True  # kind's kubelet uses the systemd driver
    assert runc["BinaryName"] == "/usr/local/bin/runc-bounded"
    network = _documents(NODE_DIR / "default-cni.yaml")
    (daemonset,) = [doc for doc in network if doc["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == kind.NETWORK_IMAGE and container["imagePullPolicy"] == "Never"
    config = yaml.safe_load((REPO / "kind-config.yaml").read_text())
    patches = [yaml.safe_load(patch) for patch in config["kubeadmConfigPatches"]]
    assert {"kind": "KubeletConfiguration", "failCgroupV1": False} in patches
