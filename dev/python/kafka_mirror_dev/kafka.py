"""A real Apache Kafka cluster in KRaft mode, on loopback ports: one node by default, or several
brokers so that a test can stop one of them."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kafka_mirror_dev.builds import kafka_libs, require
from kafka_mirror_dev.certificates import ClusterCertificates, ensure_cluster_certificates
from kafka_mirror_dev.clients import DetachedAdmin
from kafka_mirror_dev.coordinators import (
    GROUP_PARTITIONS,
    coordinator_answers,
    restore_preferred_leaders,
)
from kafka_mirror_dev.processes import ServerProcess, free_port, port_open

# The transaction coordinator's decisions (inits, aborts, timeouts) are a failed exactly-once
# test's evidence.
_LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.transactions.name = kafka.coordinator.transaction
logger.transactions.level = INFO
"""


# The collector Kafka's own scripts choose (kafka-run-class.sh): MirrorMaker 2 and the Java
# clients of the benchmarks run with it, as in production.
KAFKA_SCRIPTS_JVM = ("-XX:+UseG1GC",)
# The dev clusters' brokers and the tests' JVMs live minutes on a machine of two cores, and the
# test suite is bound by those cores: the C1 compiler alone and the serial collector halve their
# CPU time against C2 and G1 (a broker's start, 1.5 to 6 million records written and read twice,
# idle: 12-19 CPU-s → 6-10), and a broker wrote faster so.
DEV_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# The dev clusters' brokers with fewer threads than Kafka's defaults (8 request handlers, 3
# network threads, 4 group and share coordinator threads, ...), each waking on its own timers: an
# idle broker took 2.3-2.7 % of a core with the defaults, 1.6 % so (2026-11-28), and a test
# session keeps about ten of them on two cores. Two handlers still serve both cores.
DEV_BROKER_THREADS = {
    "num.io.threads": "2",
    "num.network.threads": "1",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "group.coordinator.threads": "1",
    "share.coordinator.threads": "1",
}


def java_command(
    libs: Path,
    main_class: str,
    *args: str,
    heap: str = "512m",
    jvm: tuple[str, ...] = KAFKA_SCRIPTS_JVM,
    jvm_options: tuple[str, ...] = (),
) -> list[str]:
    """A `java` command line for one of Kafka's main classes."""
    return [
        require("java"),
        f"-Xmx{heap}",
        *jvm,
        "-Djava.awt.headless=true",
        *jvm_options,
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]


# A development-only SCRAM user on every cluster's SASL listeners.
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER, SCRAM_PASSWORD = "mirror", "mirror-dev-secret"
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
# Node 1 is the cluster's only KRaft controller (and a broker); nodes 2… are brokers only.
CONTROLLER_NODE = 1


@dataclass(kw_only=True)
class ClientPorts:
    """A node's four client listeners on `host` (loopback, or an address pods reach such as
    the dev node's bridge: node.GATEWAY), listened on and advertised (keyword-only, so
    that a subclass's own fields keep their places)."""

    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    sasl_port: int = field(default_factory=free_port)
    ssl_port: int = field(default_factory=free_port)
    sasl_ssl_port: int = field(default_factory=free_port)

    @property
    def client_listeners(self) -> str:
        return (
            f"PLAINTEXT://{self.host}:{self.port},"
            f"SASL_PLAINTEXT://{self.host}:{self.sasl_port},"
            f"SSL://{self.host}:{self.ssl_port},"
            f"SASL_SSL://{self.host}:{self.sasl_ssl_port}"
        )


@dataclass
class KafkaNode(ClientPorts):
    """One Kafka process of a cluster: its node id, directory (config, data, logs), client
    ports (the same four listeners on every node) and process."""

    node_id: int
    directory: Path
    process: ServerProcess | None = None

    @property
    def formatted(self) -> bool:
        return (self.directory / "data" / "meta.properties").exists()


@dataclass
class LocalKafka(ClientPorts):
    """Cluster `alias` (A or B) in `workdir`: `brokers` nodes, node 1 a combined broker and
    controller (the only controller), the others brokers only, each with its own directory
    (node 1 `workdir` itself, node n `workdir/node-n`) and ports.

    Clients connect on `port` (PLAINTEXT), `sasl_port` (SASL_PLAINTEXT, SCRAM-SHA-512, with the
    user SCRAM_USER), `ssl_port` (mutual TLS: the client certificate is required) or
    `sasl_ssl_port` (SCRAM-SHA-512 over TLS), node 1's ports; every node has the same four
    listeners, and the `*_bootstrap_servers` name all nodes. The TLS listeners present a
    certificate of the cluster's own development CA (`ca_certificate_pem`), which also signed
    the client certificate (`client_certificate_pem`, `client_key_pem`). Controller and
    inter-broker traffic stay PLAINTEXT.

    With several brokers, topics created with the broker's defaults and Kafka's internal topics
    get three replicas (or one per broker if fewer), so `stop_broker` can take a broker away
    while the cluster keeps serving: writes with acks=all then wait only on partitions whose
    `min.insync.replicas` can no longer be met.

    With `authorizer`, KRaft's StandardAuthorizer checks every request, allowing what no ACL
    names (`allow.everyone.if.no.acl.found`): everything works until a test adds an ACL, and
    an ACL on a topic then decides everything on it (a DENY of Write alone also hides it from
    Describe, as nothing allows that). No super user: the brokers' and the controller's own
    requests come as User:ANONYMOUS over PLAINTEXT, like a PLAINTEXT client's, and need only
    the Cluster resource, which ACLs on topics leave alone (one on the Cluster would lock them
    out too).
    """

    alias: str
    workdir: Path
    controller_port: int = field(default_factory=free_port)
    brokers: int = 1
    authorizer: bool = False
    # 0: a test's group forms at once. Brokers default to 3 s, so that members starting
    # together (a pod's mirroring processes) form one generation instead of rebalancing.
    initial_rebalance_delay_ms: int = 0
    # How long an empty group's offsets are kept (Kafka's 7 days when None); when set, the
    # broker looks for expired ones every second, so a test sees them go within a minute.
    offsets_retention_minutes: int | None = None
    # The brokers' JVM: the benchmarks give theirs Kafka's own (KAFKA_SCRIPTS_JVM), as production.
    jvm: tuple[str, ...] = DEV_JVM
    # Kafka's own thread counts when empty: the benchmarks run their brokers as production does.
    threads: dict[str, str] = field(default_factory=lambda: dict(DEV_BROKER_THREADS))
    nodes: list[KafkaNode] = field(init=False, repr=False)
    leaders_moved: bool = field(default=False, init=False, repr=False)  # by `stop_broker`

    def __post_init__(self) -> None:
        if self.brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, not {self.brokers}")
        # Node 1 is the cluster of old: the cluster's own directory and ports.
        first = KafkaNode(
            node_id=CONTROLLER_NODE,
            directory=self.workdir,
            host=self.host,
            port=self.port,
            sasl_port=self.sasl_port,
            ssl_port=self.ssl_port,
            sasl_ssl_port=self.sasl_ssl_port,
        )
        others = [
            KafkaNode(node_id=n, directory=self.workdir / f"node-{n}", host=self.host)
            for n in range(2, self.brokers + 1)
        ]
        self.nodes = [first, *others]

    @property
    def process(self) -> ServerProcess | None:
        """Node 1's process (the controller's)."""
        return self.nodes[0].process

    def node(self, node_id: int) -> KafkaNode:
        if not 1 <= node_id <= len(self.nodes):
            raise ValueError(f"cluster {self.alias} has nodes 1 to {len(self.nodes)}")
        return self.nodes[node_id - 1]

    def _servers(self, listener: str) -> str:
        return ",".join(f"{self.host}:{getattr(node, listener)}" for node in self.nodes)

    @property
    def bootstrap_servers(self) -> str:
        return self._servers("port")

    @property
    def sasl_bootstrap_servers(self) -> str:
        return self._servers("sasl_port")

    @property
    def ssl_bootstrap_servers(self) -> str:
        return self._servers("ssl_port")

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        return self._servers("sasl_ssl_port")

    @property
    def certificates(self) -> ClusterCertificates:
        """The cluster's development TLS files (generated by `start`)."""
        return ClusterCertificates(self.workdir / "tls")

    @property
    def ca_certificate_pem(self) -> str:
        """The CA certificate that signed the broker's and the client's certificates."""
        return self.certificates.ca_certificate.read_text()

    @property
    def client_certificate_pem(self) -> str:
        return self.certificates.client_certificate.read_text()

    @property
    def client_key_pem(self) -> str:
        """The client certificate's private key (unencrypted PKCS#8)."""
        return self.certificates.client_key.read_text()

    def _properties(self, node: KafkaNode) -> str:
        tls = self.certificates
        controller = node.node_id == CONTROLLER_NODE
        scram = SCRAM_MECHANISM.lower()
        # Internal topics on up to three brokers, so that stopping one loses no coordinator;
        # their min.insync.replicas stays 1, so stopping one stalls no group or transaction.
        replicas = str(min(self.brokers, 3))
        settings = {
            "process.roles": "broker,controller" if controller else "broker",
            "node.id": str(node.node_id),
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": node.client_listeners
            + (f",CONTROLLER://127.0.0.1:{self.controller_port}" if controller else ""),
            "advertised.listeners": node.client_listeners,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_plaintext.{scram}.sasl.jaas.config": _SCRAM_LOGIN,
            f"listener.name.sasl_ssl.{scram}.sasl.jaas.config": _SCRAM_LOGIN,
            # Kafka's PEM stores: the key and chain, and the CA, straight from the PEM files.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls.ca_certificate),
            "listener.name.ssl.ssl.client.auth": "required",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": replicas,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": str(GROUP_PARTITIONS),
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": str(self.initial_rebalance_delay_ms),
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # The controller's no-op record, which moves the metadata log's high watermark while
            # nothing changes: every 500 ms by default (an idle broker took 2.7 % of a core, about
            # 1.7 % with 5 s, roughly measured). A test session keeps a dozen brokers idle on two
            # cores; metadata changes still go out at once.
            "metadata.max.idle.interval.ms": "5000",
            # A transaction its killed writer left open ends at its timeout plus up to this
            # (10 s by default); the exactly-once tests wait for that after every kill.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
            **self.threads,
        }
        if self.offsets_retention_minutes is not None:
            settings |= {
                "offsets.retention.minutes": str(self.offsets_retention_minutes),
                "offsets.retention.check.interval.ms": "1000",
            }
        if self.authorizer:
            settings |= {
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "allow.everyone.if.no.acl.found": "true",
            }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _cluster_id(self) -> str:
        """Node 1's cluster id once formatted (a broker formatted later must share it), else a
        new one."""
        meta = self.nodes[0].directory / "data" / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.removeprefix("cluster.id=")
        return str(uuid.uuid4())

    def _format(self, libs: Path, node: KafkaNode, config: Path, cluster_id: str) -> None:
        # The controller starts the metadata log, so it alone takes the quorum and the users.
        controller_only = (
            [
                "--standalone",
                "--add-scram",
                f"{SCRAM_MECHANISM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
            ]
            if node.node_id == CONTROLLER_NODE
            else []
        )
        subprocess.run(
            java_command(
                libs,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                *controller_only,
                heap="256m",
                jvm=DEV_JVM,
            ),
            check=True,
            capture_output=True,
            text=True,
        )

    def _start_node(self, libs: Path, node: KafkaNode, cluster_id: str) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        config = node.directory / "server.properties"
        config.write_text(self._properties(node))
        (node.directory / "log4j2.properties").write_text(_LOG4J2)
        if not node.formatted:
            self._format(libs, node, config, cluster_id)
        command = java_command(
            libs,
            "kafka.Kafka",
            str(config),
            jvm=self.jvm,
            jvm_options=(
                f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node.directory / 'logs'}",
            ),
        )
        name = f"kafka-{self.alias}" + (
            "" if node.node_id == CONTROLLER_NODE else f"-{node.node_id}"
        )
        node.process = ServerProcess(name, command, node.directory / "stdout.log")
        node.process.start()

    def start(self, timeout: float = 120.0) -> None:
        libs = kafka_libs()
        self.workdir.mkdir(parents=True, exist_ok=True)
        ensure_cluster_certificates(self.certificates.directory, self.alias, self.host)
        cluster_id = self._cluster_id()
        for node in self.nodes:
            self._start_node(libs, node, cluster_id)
        self._wait_until_up(self.nodes, timeout)

    def _wait_until_up(self, started: list[KafkaNode], timeout: float) -> None:
        """The port opens before the broker has joined its own quorum, and group requests fail
        with NOT_COORDINATOR until `__consumer_offsets` exists (which needs as many brokers as
        its replicas): wait until every node listens and every running one is registered (a
        test may keep another broker stopped), and groups work."""
        for node in started:
            assert node.process is not None
            node.process.wait_until(partial(port_open, node.port, node.host), timeout, "listening")

        def serving(admin: DetachedAdmin) -> bool:
            try:
                running = [n for n in self.nodes if n.process and n.process.pid is not None]
                if len(admin.client.list_topics(timeout=2).brokers) < len(running):
                    return False
            except Exception:
                return False
            return coordinator_answers(self.bootstrap_servers)

        watched = started[0].process
        assert watched is not None
        # Its brokers are the ones coming back: see kafka_mirror_dev.clients.
        with DetachedAdmin(self.bootstrap_servers) as admin:
            watched.wait_until(
                partial(serving, admin), timeout, "serving metadata and consumer groups"
            )

    def _broker_only(self, node_id: int) -> KafkaNode:
        if node_id == CONTROLLER_NODE:
            raise ValueError(
                f"node {CONTROLLER_NODE} is cluster {self.alias}'s only controller: "
                "stop and start the whole cluster instead"
            )
        return self.node(node_id)

    def stop_broker(self, node_id: int) -> None:
        """Stop broker `node_id` (2, 3, …) with a controlled shutdown: its partitions get other
        leaders and it leaves their in-sync replicas, so from then on acks=all writes wait on
        the partitions whose `min.insync.replicas` needed it, and flow on the others."""
        node = self._broker_only(node_id)
        if node.process is not None:
            node.process.stop()
            self.leaders_moved = True

    def start_broker(self, node_id: int, timeout: float = 120.0) -> None:
        """Start broker `node_id` again; returns once the cluster lists it. It then catches up
        and rejoins the in-sync replicas on its own (a few seconds)."""
        node = self._broker_only(node_id)
        self._start_node(kafka_libs(), node, self._cluster_id())
        self._wait_until_up([node], timeout)

    def restore_leaders(self) -> None:
        """After `stop_broker`: every broker running, every partition on its preferred leader
        and every group coordinator answering (kafka_mirror_dev.coordinators says why)."""
        if not self.leaders_moved:
            return
        for node in self.nodes[1:]:
            if node.process is None or node.process.pid is None:
                self.start_broker(node.node_id)
        assert self.process is not None
        restore_preferred_leaders(self.bootstrap_servers, self.process.wait_until)
        self.leaders_moved = False

    def stop(self) -> None:
        # Brokers first, while the controller still runs: their controlled shutdown needs it
        # (without it each would wait for its SIGKILL).
        for node in reversed(self.nodes):
            if node.process is not None:
                node.process.stop()

    def server_logs(self) -> list[Path]:
        """Each node's log: Kafka's warnings and errors (`_LOG4J2`)."""
        return [node.directory / "logs" / "server.log" for node in self.nodes]

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
