"""A real schema registry on a loopback port: Apicurio Registry (built from Maven Central by
`builds.schema_registry_jar`), its in-memory storage, answering Confluent's REST API."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kafka_mirror_dev.builds import require, schema_registry_jar
from kafka_mirror_dev.kafka import DEV_JVM
from kafka_mirror_dev.processes import ServerProcess, answers, free_port

CONFLUENT_API = "/apis/ccompat/v7"  # Apicurio's Confluent-compatible API
REGISTER_ATTEMPTS = 5


@dataclass
class LocalSchemaRegistry:
    name: str
    workdir: Path
    port: int = field(default_factory=free_port)
    process: ServerProcess | None = None

    @property
    def url(self) -> str:
        """The base URL a Confluent client (and the worker) is given."""
        return f"http://127.0.0.1:{self.port}{CONFLUENT_API}"

    def start(self, timeout: float = 120.0) -> None:
        jar = schema_registry_jar()
        command = [
            require("java"),
            "-Xmx256m",
            *DEV_JVM,
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.http.host=127.0.0.1",
            "-jar",
            str(jar),
        ]
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = ServerProcess(
            f"schema registry {self.name}", command, self.workdir / "registry.log"
        )
        self.process.start()
        self.process.wait_until(lambda: answers(f"{self.url}/subjects"), timeout, "answering")

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """Register a schema the way a producer's serializer does; its id on this registry.
        A server error is tried again: Apicurio 2.4's in-memory storage answers 500 to one of
        two registrations at the same time (H2: "Concurrent update in table SEQUENCES")."""
        body = json.dumps({"schema": schema, "schemaType": schema_type}).encode()
        for attempt in range(REGISTER_ATTEMPTS):
            request = urllib.request.Request(
                f"{self.url}/subjects/{subject}/versions",
                data=body,
                headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return int(json.load(response)["id"])
            except urllib.error.HTTPError as error:
                if error.code < 500 or attempt == REGISTER_ATTEMPTS - 1:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
