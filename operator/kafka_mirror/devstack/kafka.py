"""A real single-node Apache Kafka cluster in KRaft mode, on loopback ports."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kafka_mirror.devstack.builds import kafka_libs, require
from kafka_mirror.devstack.processes import ServerProcess, free_port, port_open

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
"""


def java_command(
    libs: Path, main_class: str, *args: str, heap: str = "512m", jvm_options: tuple[str, ...] = ()
) -> list[str]:
    """A `java` command line for one of Kafka's main classes."""
    return [
        require("java"),
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        *jvm_options,
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]


# A development-only SCRAM user on every cluster's SASL listener.
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER, SCRAM_PASSWORD = "mirror", "mirror-dev-secret"


@dataclass
class KafkaCluster:
    """Cluster `alias` (A or B) in `workdir`: one combined broker and controller.

    Clients connect on `port` (PLAINTEXT) or `sasl_port` (SASL_PLAINTEXT, SCRAM-SHA-512, with
    the user SCRAM_USER).
    """

    alias: str
    workdir: Path
    port: int = field(default_factory=free_port)
    sasl_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: ServerProcess | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def _properties(self) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def start(self, timeout: float = 120.0) -> None:
        libs = kafka_libs()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text(self._properties())
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        if not (self.workdir / "data" / "meta.properties").exists():
            subprocess.run(
                java_command(
                    libs,
                    "kafka.tools.StorageTool",
                    "format",
                    "--standalone",
                    "-t",
                    str(uuid.uuid4()),
                    "-c",
                    str(config),
                    "--add-scram",
                    f"{SCRAM_MECHANISM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
                    heap="256m",
                ),
                check=True,
                capture_output=True,
                text=True,
            )
        command = java_command(
            libs,
            "kafka.Kafka",
            str(config),
            jvm_options=(
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={self.workdir / 'logs'}",
            ),
        )
        self.process = ServerProcess(f"kafka-{self.alias}", command, self.workdir / "stdout.log")
        self.process.start()
        self.process.wait_until(lambda: port_open(self.port), timeout, "listening")
        self._wait_until_serving(timeout)

    def _wait_until_serving(self, timeout: float) -> None:
        """The port opens before the broker has joined its own quorum, and group requests fail
        with NOT_COORDINATOR until `__consumer_offsets` exists: wait for both."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})

        def serving() -> bool:
            try:
                if not admin.list_topics(timeout=2).brokers:
                    return False
                probe = admin.describe_consumer_groups(["dev-stack-probe"], request_timeout=2)
                probe["dev-stack-probe"].result()
            except Exception:
                return False
            return True

        assert self.process is not None
        self.process.wait_until(serving, timeout, "serving metadata and consumer groups")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
