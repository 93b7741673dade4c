"""Session-scoped real parts (Kafka A and B, kube-apiserver, kubectl, Helm), started only when
a test asks for them; a fresh namespace per test. Everything is built or fetched into the user
cache by the repository's own code (`kafka_mirror_dev`)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from kubernetes import client
from pyspark.sql import SparkSession

from kafka_mirror.kube import api_client, install_crds
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import HELM, KUBECTL, export_spark_jars
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import GATEWAY, KubeNode
from kafka_mirror_dev.operator import OperatorProcess
from kafka_mirror_dev.prerequisites import unavailable_reason, uncompiled_hot_path
from kafka_mirror_dev.schema_registry import LocalSchemaRegistry
from kafka_mirror_dev.spark import export_dev_jvm
from tests.helpers.faults import Outcome
from tests.helpers.kafka import release_admins
from tests.helpers.kubectl import Kubectl
from tests.helpers.node import NodePods, NodeStack, favour_the_node_line
from tests.helpers.spark import LocalSpark
from tests.helpers.stack import BrokerLogs, MirrorStack, run_operator
from tests.helpers.worker import StartWorker, WorkerProcess, wait_for

pytest_plugins = [
    "tests.helpers.tenant",  # a tenant's identity and the operator guarding it
    "tests.helpers.failures",  # each failure's reason as it happens (CI shows part of the output)
    "tests.helpers.timeline",  # the `long` tests, the order that keeps the suite short, and
    # when each worker went idle
]

# Hypothesis times each example (200 ms by default) and its data generation: assertions on a
# machine's speed, which a busy machine fails (an invariant check of 400 syncs took longer).
# The properties are what the tests check; their time is the suite's to bound.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def pytest_configure(config: pytest.Config) -> None:
    """The tests run the hot path as the image does: compiled, and from the current sources."""
    problem = uncompiled_hot_path()
    if problem is not None:
        raise pytest.UsageError(problem)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    release_admins()


# What a test's fixtures start says which real parts it needs (its markers, which select the
# tiers: docs/dev-stack.md) and which parts only one of the suite's parallel workers may run:
# the real node changes the host (a bridge, iptables), so its tests share one worker and one
# node; the three-broker and the ACL clusters are started by one worker, not by each.
NEEDS = {
    "kafka_a": "kafka",
    "kafka_b": "kafka",
    "kafka_b3": "kafka",
    "kafka_b_acl": "kafka",
    "kube_apiserver": "kube",
    "bare_apiserver": "kube",
    "helm": "helm",
    "kube_node": "node",
    "spark": "spark",
}
ONE_WORKER = {"kube_node": "node", "kafka_b3": "b3", "kafka_b_acl": "acl", "kafka_a_acl": "acl"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for marker in sorted({NEEDS[f] for f in fixtures & NEEDS.keys()}):
            item.add_marker(marker)
        group = next((ONE_WORKER[f] for f in ONE_WORKER if f in fixtures), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `spark` runs the audit as the image does, with $KAFKA_MIRROR_SPARK_JARS
    naming Spark's Kafka jars: the dev package's Maven resolution, resolved once, before the
    test's fixtures start a Spark session or an audit process (which inherits it and the dev
    stack's JVM options)."""
    if item.get_closest_marker("spark"):
        export_spark_jars()
        export_dev_jvm()


def _cluster(
    alias: str,
    tmp_path_factory: pytest.TempPathFactory,
    brokers: int = 1,
    authorizer: bool = False,
    host: str = "127.0.0.1",
    offsets_retention_minutes: int | None = None,
) -> Iterator[LocalKafka]:
    workdir = tmp_path_factory.mktemp(f"kafka-{alias}")
    cluster = LocalKafka(
        alias,
        workdir,
        brokers=brokers,
        authorizer=authorizer,
        host=host,
        offsets_retention_minutes=offsets_retention_minutes,
    )
    cluster.start()
    yield cluster
    cluster.remove()


@pytest.fixture(scope="session")
def kafka_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """Real Kafka cluster A (KRaft, one node) on a loopback port."""
    yield from _cluster("A", tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """Real Kafka cluster B (KRaft, one node) on a loopback port."""
    yield from _cluster("B", tmp_path_factory)


class GroupCluster:
    """A cluster that only one group of tests uses (`ONE_WORKER`: the group runs in a row on one
    worker): started for the group's first test and stopped after its last
    (`pytest_runtest_teardown` below), not kept idle for the rest of the session (an idle
    broker takes about 1.2 % of a core; the three brokers' group ends a quarter of the way in).
    A later test that needs it again gets a new one."""

    def __init__(self, group: str, start: Callable[[], LocalKafka]) -> None:
        self.group, self.start = group, start
        self.cluster: LocalKafka | None = None
        GROUP_CLUSTERS.append(self)

    def get(self) -> LocalKafka:
        if self.cluster is None:
            self.cluster = self.start()
        return self.cluster

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.remove()
            self.cluster = None


GROUP_CLUSTERS: list[GroupCluster] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the test's own fixtures: a group's cluster stopped when the next test (pytest-xdist
    names it before running this one) is not of its group."""
    yield
    marker = nextitem.get_closest_marker("xdist_group") if nextitem is not None else None
    following = marker.args[0] if marker is not None else None
    for group in GROUP_CLUSTERS:
        if group.group != following:
            group.stop()


def _started(cluster: LocalKafka) -> LocalKafka:
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupCluster]:
    group = GroupCluster(
        ONE_WORKER["kafka_b3"],
        lambda: _started(LocalKafka("B", tmp_path_factory.mktemp("kafka-B"), brokers=3)),
    )
    yield group
    group.stop()


@pytest.fixture
def kafka_b3(three_brokers: GroupCluster) -> Iterator[LocalKafka]:
    """A target cluster B of three brokers (node 1 also the KRaft controller), for the tests
    that stop one broker (`stop_broker(2)` or `3`) to stall the partitions that need it. One
    per test process at a time; a test that stopped a broker hands it on with every broker
    running and every leader back where it was (`LocalKafka.restore_leaders`)."""
    cluster = three_brokers.get()
    yield cluster
    cluster.restore_leaders()


@pytest.fixture(scope="session")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupCluster]:
    group = GroupCluster(
        ONE_WORKER["kafka_b_acl"],
        lambda: _started(LocalKafka("B", tmp_path_factory.mktemp("kafka-B"), authorizer=True)),
    )
    yield group
    group.stop()


@pytest.fixture
def kafka_b_acl(acl_cluster: GroupCluster) -> LocalKafka:
    """A target cluster B (one node) whose brokers check ACLs (KRaft's StandardAuthorizer),
    allowing everything no ACL names: for the tests that deny the mirror a topic."""
    return acl_cluster.get()


@pytest.fixture(scope="session")
def acl_cluster_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GroupCluster]:
    group = GroupCluster(
        ONE_WORKER["kafka_a_acl"],
        lambda: _started(LocalKafka("A", tmp_path_factory.mktemp("kafka-A"), authorizer=True)),
    )
    yield group
    group.stop()


@pytest.fixture
def kafka_a_acl(acl_cluster_a: GroupCluster) -> LocalKafka:
    """A source cluster A whose brokers check ACLs, as kafka_b_acl: for the scenarios whose
    applications have rights of their own on both sides."""
    return acl_cluster_a.get()


@pytest.fixture
def start_registry(tmp_path: Path) -> Iterator[Callable[[str], LocalSchemaRegistry]]:
    """Start real schema registries (Apicurio Registry, Confluent's API), empty; each stopped
    after the test."""
    started: list[LocalSchemaRegistry] = []

    def start(name: str) -> LocalSchemaRegistry:
        registry = LocalSchemaRegistry(name, tmp_path / f"registry-{name}")
        started.append(registry)
        registry.start()
        return registry

    yield start
    for registry in started:
        registry.remove()


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A real kube-apiserver with etcd; no controllers run."""
    server = KubeApiServer(tmp_path_factory.mktemp("kube"))
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="module")
def bare_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A real kube-apiserver with nothing installed, for the tests of install paths (Helm,
    kubectl, kustomize) that bring the CRDs themselves."""
    server = KubeApiServer(tmp_path_factory.mktemp("kube-bare"))
    server.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def kube_api(kube_apiserver: KubeApiServer) -> Iterator[client.ApiClient]:
    """An admin client of the real API server, with the project's CRDs installed."""
    api = api_client(kube_apiserver.kubeconfig)
    install_crds(api)
    yield api
    api.close()


# The Pod Security level of the node's namespaces, as the plain manifests label theirs: every pod
# the operator, the chart or a test makes there must meet it, or the API server refuses it.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def _fresh_namespace(
    api: client.ApiClient, with_default_account: bool = False, labels: dict[str, str] | None = None
) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels))
    )
    if with_default_account:
        # The node's controller manager makes it a moment later, on a busy machine seconds
        # later; a pod is refused until then (a Deployment's controller just tries again).
        wait_for(
            lambda: bool(
                core.list_namespaced_service_account(
                    name, field_selector="metadata.name=default"
                ).items
            ),
            60,
            f"the ServiceAccount default of namespace {name}",
        )
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for one test."""
    yield from _fresh_namespace(kube_api)


@pytest.fixture
def other_namespaces(kube_api: client.ApiClient) -> Iterator[list[str]]:
    """Two more fresh namespaces, for a test across namespaces."""
    made = [_fresh_namespace(kube_api) for _ in range(2)]
    yield [next(namespace) for namespace in made]
    for namespace in made:
        next(namespace, None)


@pytest.fixture(scope="session")
def helm() -> Path:
    """The Helm binary built from its pinned Go module."""
    return HELM.ensure()


@pytest.fixture(scope="session")
def kubectl() -> Path:
    """The kubectl binary built from its pinned Go module (the API server's release)."""
    return KUBECTL.ensure()


@pytest.fixture
def operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    yield from run_operator(OperatorProcess(kube_apiserver.kubeconfig, namespace, tmp_path))


@pytest.fixture
def granting_operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The operator of an installer who lets mirrors steer ACL grants (renamed principals,
    moved applications' rights: `--allow-spec-acl-grants`)."""
    process = OperatorProcess(
        kube_apiserver.kubeconfig, namespace, tmp_path, extra_args=("--allow-spec-acl-grants",)
    )
    yield from run_operator(process)


@pytest.fixture
def start_worker(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StartWorker]:
    """Start worker processes; they are stopped (and their logs shown on failure) afterwards."""
    workers: list[WorkerProcess] = []

    def start(
        config: dict[str, Any], name: str = "worker", env: dict[str, str] | None = None
    ) -> WorkerProcess:
        worker = WorkerProcess(config, tmp_path, name, env).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        if worker.running():
            worker.dump_stacks()  # shown with the log below when the test failed
            figures = [
                line
                for line in (worker.get("/metrics") or "").splitlines()
                if line.startswith(
                    (
                        "kafka_mirror_records_total",
                        "kafka_mirror_errors",
                        "kafka_mirror_lag",
                        "kafka_mirror_cluster",
                    )
                )
            ]
            print(f"----- {worker.name} metrics -----", *figures, sep="\n")
            try:
                worker.stop()
            except subprocess.TimeoutExpired:
                print(f"----- {worker.name} did not stop within 30 s of SIGTERM -----")
                worker.kill()
        else:
            print(f"----- {worker.name} had exited: {worker.process and worker.process.returncode}")
            print(worker.native_stacks())  # after a crash, from its core
        # Its own lines first (librdkafka's connection noise can fill any tail), then the tail.
        own = [line for line in worker.log().splitlines() if not line.startswith("%")]
        print(
            f"----- {worker.name} log without librdkafka's lines, the last 60 -----",
            *own[-60:],
            sep="\n",
        )
        print(f"----- {worker.name} log, the end ({worker.log_path}) -----\n{worker.log()[-3000:]}")


@pytest.fixture
def stack(
    kafka_a: LocalKafka,
    kafka_b: LocalKafka,
    start_worker: StartWorker,
    request: pytest.FixtureRequest,
) -> Iterator[MirrorStack]:
    """Kafka A and B, the worker launcher and (on first use) Spark: tests/helpers/stack.py."""
    logs = BrokerLogs(kafka_a, kafka_b)
    yield MirrorStack(kafka_a, kafka_b, start_worker, request)
    logs.print()


@pytest.fixture(scope="session")
def local_spark() -> Iterator[LocalSpark]:
    spark = LocalSpark()
    yield spark
    spark.stop()


@pytest.fixture
def spark(local_spark: LocalSpark) -> SparkSession:
    """The test process's local Spark session, proved to answer: tests/helpers/spark.py."""
    return local_spark.get()


@pytest.fixture(scope="module")
def outcomes() -> Iterator[list[Outcome]]:
    """Collects each test's figures; printed as a table (and written as JSON to the path in
    $FAULT_FIGURES, for the docs) after the module."""
    rows: list[Outcome] = []
    yield rows
    print("\n| fault | records | lost | duplicates (bound) | recovery s |")
    for row in rows:
        print(
            f"| {row.fault} | {row.records:,} | {row.lost} | "
            f"{row.duplicates:,} (≤ {row.duplicate_bound:,}) | {row.recovery_seconds:.1f} |"
        )
    if target := os.environ.get("FAULT_FIGURES"):
        Path(target).write_text(json.dumps([asdict(row) for row in rows], indent=2))


@pytest.fixture(scope="session")
def kube_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeNode]:
    """A real single-node cluster (kubelet, controllers, scheduler, kube-proxy, containerd)
    with the project's image in its store. Skipped where no node can run, except in CI."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI requires the real node, which cannot run here: {reason}")
        pytest.skip(reason)
    favour_the_node_line()
    node = KubeNode(tmp_path_factory.mktemp("kube-node")).start()
    yield node
    problems = node.remove()
    assert not problems, f"the node left the host changed: {problems}"


@pytest.fixture(scope="session")
def node_api(kube_node: KubeNode) -> Iterator[client.ApiClient]:
    """An admin client of the node's API server."""
    api = api_client(kube_node.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="session")
def node_kafka_a(
    kube_node: KubeNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalKafka]:
    """Kafka cluster A listening on (and advertising) the node's bridge address, which pods
    reach."""
    yield from _cluster("A", tmp_path_factory, host=GATEWAY)


@pytest.fixture(scope="session")
def node_kafka_a_forgetful(
    kube_node: KubeNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalKafka]:
    """A cluster A on the node's bridge address that forgets an empty group's offsets after one
    minute (`offsets.retention.minutes`, 7 days by default): the long outage in short."""
    yield from _cluster("A", tmp_path_factory, host=GATEWAY, offsets_retention_minutes=1)


@pytest.fixture(scope="session")
def node_kafka_b(
    kube_node: KubeNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalKafka]:
    """Kafka cluster B on the node's bridge address."""
    yield from _cluster("B", tmp_path_factory, host=GATEWAY)


@pytest.fixture
def node_namespace(node_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace on the node's API server for one test, its default ServiceAccount
    made, enforcing the restricted Pod Security level."""
    yield from _fresh_namespace(node_api, with_default_account=True, labels=RESTRICTED)


@pytest.fixture
def node_operator(
    request: pytest.FixtureRequest,
    kube_node: KubeNode,
    node_api: client.ApiClient,
    node_namespace: str,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    """The operator as a local process on the node's API server, its workers and audits pods
    of the node's image; a test's `operator_args` marker adds flags (an allow-list, say)."""
    install_crds(node_api)
    marker = request.node.get_closest_marker("operator_args")
    args = ("--worker-image", kube_node.image, "--audit-image", kube_node.audit_image)
    args += marker.args if marker else ()
    yield from run_operator(
        OperatorProcess(kube_node.kubeconfig, node_namespace, tmp_path, extra_args=args)
    )


@pytest.fixture
def node_pods(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> Iterator[NodePods]:
    """The namespace's pods on the node; their logs and events are shown after the test."""
    pods = NodePods(kube_node, node_api, node_namespace)
    yield pods
    print(pods.diagnostics())


@pytest.fixture
def node_stack(
    node_kafka_a: LocalKafka,
    node_kafka_b: LocalKafka,
    node_api: client.ApiClient,
    node_namespace: str,
    node_operator: OperatorProcess,
    node_pods: NodePods,
) -> NodeStack:
    return NodeStack(node_kafka_a, node_kafka_b, node_api, node_namespace, node_operator, node_pods)


@pytest.fixture
def node_kc(kubectl: Path, kube_node: KubeNode, node_namespace: str) -> Kubectl:
    return Kubectl(kubectl, kube_node.kubeconfig, node_namespace)
