"""The audit on Spark on Kubernetes as rendered (render_spark.py) and the executor's command
(audit/executor.py): the driver's settings, the executors' template with every pod's security
context, the driver's rights on pods only, and Spark's executor contract kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kafka_mirror import render_spark
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.audit.executor import BACKEND, executor_command
from kafka_mirror.render import (
    CONFIG_DIR,
    MIRROR_LABEL,
    build_config_map,
    build_worker_config,
)
from kafka_mirror.render_audit import (
    build_audit_cronjob,
    build_audit_network_policy,
    build_audit_rbac,
    build_executor_template,
)

MASTER = "k8s://https://kubernetes.default.svc"


def spec(master: str = MASTER) -> KafkaMirrorSpec:
    return KafkaMirrorSpec.model_validate(
        {
            "source": {"alias": "A", "bootstrapServers": "kafka-a:9092"},
            "target": {"alias": "B", "bootstrapServers": "kafka-b:9092"},
            "worker": {"nodeSelector": {"pool": "mirrors"}},
            "audit": {
                "spark": {
                    "master": master,
                    "executors": {"instances": 3, "memory": "2g", "cpuRequest": "250m"},
                }
            },
        }
    )


def audit_pod(mirror: KafkaMirrorSpec) -> dict[str, Any]:
    cronjob = build_audit_cronjob("team-a", "m", mirror, [], "registry/audit:1")
    pod: dict[str, Any] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pod


def test_the_driver_is_told_the_executors_image_count_size_and_template() -> None:
    container = audit_pod(spec())["containers"][0]
    args = container["args"]
    conf = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert conf["spark.kubernetes.container.image"] == "registry/audit:1"
    assert conf["spark.executor.instances"] == "3" and conf["spark.executor.memory"] == "2g"
    assert conf["spark.kubernetes.executor.request.cores"] == "250m"
    assert conf["spark.authenticate"] == "true" and conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.kubernetes.executor.podTemplateFile"] == f"{CONFIG_DIR}/executor-pod.yaml"
    pod_env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert pod_env == render_spark.POD_ENV


def test_the_executors_template_has_every_pods_security_and_no_token() -> None:
    mirror = spec()
    template = build_executor_template("m", mirror)
    assert template is not None
    pod = yaml.safe_load(template)["spec"]
    audit = audit_pod(mirror)
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == audit["securityContext"]
    container = pod["containers"][0]
    assert container["name"] == "executor" and container["command"] == ["kafka-mirror"]
    assert container["securityContext"] == audit["containers"][0]["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["nodeSelector"] == {"pool": "mirrors"}
    labels = yaml.safe_load(template)["metadata"]["labels"]
    assert labels[MIRROR_LABEL] == "m" and labels["app.kubernetes.io/component"] == "audit-executor"
    config, _ = build_worker_config("team-a", "m", mirror, [])
    assert (
        build_config_map("team-a", "m", config, template)["data"]["executor-pod.yaml"] == template
    )


def test_only_a_kubernetes_master_adds_pods_to_the_audit_account_and_a_template() -> None:
    local = spec("local[2]")
    assert build_executor_template("m", local) is None
    _, role, _ = build_audit_rbac("team-a", "m", local)
    assert [r["resources"] for r in role["rules"]] == [["kafkamirrors/status"]]
    assert not any(
        e["name"].startswith("KAFKA_MIRROR_POD") for e in audit_pod(local)["containers"][0]["env"]
    )
    _, role, _ = build_audit_rbac("team-a", "m", spec())
    assert role["rules"][1] == {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
    }


def test_the_driver_finds_itself_from_its_pod() -> None:
    conf = render_spark.pod_conf(
        {
            "KAFKA_MIRROR_POD_IP": "10.1.2.3",
            "KAFKA_MIRROR_POD_NAME": "m-audit-1-x",
            "KAFKA_MIRROR_POD_NAMESPACE": "team-a",
        }
    )
    assert conf["spark.driver.host"] == "10.1.2.3"
    assert conf["spark.kubernetes.driver.pod.name"] == "m-audit-1-x"
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"


def test_the_executor_command_keeps_sparks_contract() -> None:
    environ = {
        "JAVA_HOME": "/usr/lib/jvm/java-17",
        "KAFKA_MIRROR_SPARK_JARS": "/opt/kafka-mirror/spark-jars",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.1.2.3:7078",
        "SPARK_EXECUTOR_ID": "2",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_APPLICATION_ID": "spark-abc",
        "SPARK_EXECUTOR_POD_IP": "10.1.2.9",
        "SPARK_EXECUTOR_POD_NAME": "kafka-mirror-audit-exec-2",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_JAVA_OPT_10": "-Dlast=1",
        "SPARK_JAVA_OPT_2": "-Dfirst=1",
    }
    command = executor_command(environ, Path("/venv/pyspark/jars"))
    assert command[:5] == [
        "/usr/lib/jvm/java-17/bin/java",
        "-Dfirst=1",
        "-Dlast=1",
        "-Xms2g",
        "-Xmx2g",
    ]
    assert command[6] == "/venv/pyspark/jars/*:/opt/kafka-mirror/spark-jars/*"
    assert command[7] == BACKEND
    flags = dict(zip(command[8::2], command[9::2], strict=True))
    assert flags == {
        "--driver-url": environ["SPARK_DRIVER_URL"],
        "--executor-id": "2",
        "--cores": "1",
        "--app-id": "spark-abc",
        "--hostname": "10.1.2.9",
        "--resourceProfileId": "0",
        "--podName": "kafka-mirror-audit-exec-2",
    }


def test_only_the_mirrors_audit_pods_may_connect_to_them() -> None:
    policy = build_audit_network_policy("team-a", "m")["spec"]
    selected = policy["podSelector"]
    assert selected["matchLabels"] == {MIRROR_LABEL: "m"}
    (components,) = selected["matchExpressions"]
    assert components["values"] == ["audit", "audit-executor"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"from": [{"podSelector": selected}]}]
