"""Rendering a KafkaMirror into its children: worker config, Deployment, CronJob, Service."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.api.clusters import SecretKeyRef
from kafka_mirror.api.models import DNS_LABEL, KafkaMirrorSpec
from kafka_mirror.api.worker_config import SelectionPatterns, WorkerConfig
from kafka_mirror.render import (
    CONFIG_CHECKSUM_ANNOTATION,
    CONFIG_DIR,
    CONFIG_FILE,
    CRONJOB_NAME_LIMIT,
    DEFAULT_AUDIT_IMAGE,
    DEFAULT_IMAGE,
    LABEL_VALUE_LIMIT,
    METRICS_PORT,
    MIRROR_LABEL,
    WORKER_ENV,
    CredentialEnv,
    audit_cronjob_name,
    build_config_map,
    build_deployment,
    build_disruption_budget,
    build_metrics_service,
    build_worker_config,
    config_checksum,
    fit,
    label_selector,
    mirror_label,
    render_worker_config,
    selector_labels,
)
from kafka_mirror.render_audit import build_audit_cronjob, build_audit_rbac

NAMESPACE = "team-a"
NAME = "a-to-b"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_FILE}"
# A mirror name at the DNS-label limit, as MirrorTopicSelection.spec.mirror allows.
LABEL_VALUE = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"  # Kubernetes' syntax
LONG_NAME = "payments-" + "x" * 50 + "-a2b"

SOURCE_PASSWORD = SecretKeyRef(name="source-credentials", key="scram-password")
SOURCE_CA = SecretKeyRef(name="source-tls", key="ca-bundle.pem")
TARGET_USERNAME = SecretKeyRef(name="target-credentials", key="plain-user")
TARGET_PASSWORD = SecretKeyRef(name="target-credentials", key="plain-pass")

SELECTIONS = [
    SelectionPatterns(name="zeta", namespace="team-a", includes=["zeta\\..*"], excludes=[]),
    SelectionPatterns(
        name="alpha",
        namespace="team-a",
        includes=["orders", "payments\\..*"],
        excludes=["payments\\.secret.*"],
    ),
]


def mirror_spec(**overrides: Any) -> KafkaMirrorSpec:
    """SASL over TLS to the source; SASL to the target, its user name from a Secret."""
    data: dict[str, Any] = {
        "source": {
            "alias": "A",
            "bootstrapServers": "kafka-a-0:9093,kafka-a-1:9093",
            "tls": {
                "enabled": True,
                "caCertificate": {"name": SOURCE_CA.name, "key": SOURCE_CA.key},
            },
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": "mirror",
                "passwordSecret": {"name": SOURCE_PASSWORD.name, "key": SOURCE_PASSWORD.key},
            },
        },
        "target": {
            "alias": "B",
            "bootstrapServers": "kafka-b:9092",
            "sasl": {
                "mechanism": "PLAIN",
                "usernameSecret": {"name": TARGET_USERNAME.name, "key": TARGET_USERNAME.key},
                "passwordSecret": {"name": TARGET_PASSWORD.name, "key": TARGET_PASSWORD.key},
            },
        },
    }
    data.update(overrides)
    return KafkaMirrorSpec.model_validate(data)


def plain_spec(**overrides: Any) -> KafkaMirrorSpec:
    """A mirror between two plaintext clusters: no credentials at all."""
    data: dict[str, Any] = {
        "source": {"alias": "A", "bootstrapServers": "kafka-a:9092"},
        "target": {"alias": "B", "bootstrapServers": "kafka-b:9092"},
    }
    data.update(overrides)
    return KafkaMirrorSpec.model_validate(data)


def worker_config(
    spec: KafkaMirrorSpec, selections: list[SelectionPatterns] = SELECTIONS
) -> tuple[WorkerConfig, list[CredentialEnv]]:
    return build_worker_config(NAMESPACE, NAME, spec, selections)


def deployment(
    spec: KafkaMirrorSpec, name: str = NAME, checksum: str = "0123456789abcdef"
) -> dict[str, Any]:
    _, envs = build_worker_config(NAMESPACE, name, spec, SELECTIONS)
    return build_deployment(NAMESPACE, name, spec, envs, checksum)


def audit_cronjob(spec: KafkaMirrorSpec, name: str = NAME) -> dict[str, Any]:
    _, envs = build_worker_config(NAMESPACE, name, spec, SELECTIONS)
    return build_audit_cronjob(NAMESPACE, name, spec, envs)


def only_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec["containers"]
    assert len(containers) == 1
    return containers[0]


def probe_port(container: dict[str, Any], probe: dict[str, Any]) -> int:
    """The container port number an httpGet probe targets (by name or by number)."""
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    return int(by_name[port])


def parse_label_selector(selector: str) -> dict[str, str]:
    return dict(term.split("=", 1) for term in selector.split(","))


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# --- the worker's configuration ------------------------------------------------------------------


def test_worker_config_holds_the_union_of_selections_sorted_by_name() -> None:
    config, _ = worker_config(mirror_spec())
    assert [(s.name, s.includes, s.excludes) for s in config.selections] == [
        ("alpha", ["orders", "payments\\..*"], ["payments\\.secret.*"]),
        ("zeta", ["zeta\\..*"], []),
    ]


def test_worker_config_without_selections_mirrors_nothing() -> None:
    config, _ = worker_config(mirror_spec(), [])
    assert config.selections == []


def test_worker_config_names_the_mirror_and_its_consumer_group() -> None:
    config, _ = worker_config(mirror_spec())
    assert config.mirror == "team-a/a-to-b"
    assert config.consumer_group == "kafka-mirror.team-a.a-to-b"
    assert config.metrics_port == METRICS_PORT


def test_worker_config_takes_clusters_and_behaviour_from_the_spec() -> None:
    spec = plain_spec(
        source={
            "alias": "us-east",
            "bootstrapServers": "kafka-a-0:9092,kafka-a-1:9092",
            "config": {"fetch.max.bytes": "1048576"},
        },
        topicNaming={"policy": "prefix", "separator": "_"},
        refreshTopicsIntervalSeconds=30,
        offsetSyncs={"maxLag": 500, "location": "target"},
        heartbeats={"enabled": False},
    )
    config, _ = worker_config(spec)
    assert (config.source.alias, config.target.alias) == ("us-east", "B")
    assert config.source.bootstrap_servers == "kafka-a-0:9092,kafka-a-1:9092"
    assert config.source.config == {"fetch.max.bytes": "1048576"}
    assert config.topic_naming == spec.topic_naming
    assert config.refresh_topics_interval_seconds == 30
    assert config.offset_syncs == spec.offset_syncs
    assert config.checkpoints == spec.checkpoints
    assert config.heartbeats.enabled is False
    assert config.topic_config_sync == spec.topic_config_sync


def test_credentials_are_named_as_environment_variables_filled_from_secrets() -> None:
    config, envs = worker_config(mirror_spec())
    assert config.source.sasl is not None
    assert config.source.sasl.username == "mirror"
    assert config.source.sasl.username_env is None
    assert config.source.sasl.password_env == "KAFKA_MIRROR_SOURCE_SASL_PASSWORD"
    assert config.source.tls.ca_env == "KAFKA_MIRROR_SOURCE_TLS_CA"
    assert config.target.sasl is not None
    assert config.target.sasl.username_env == "KAFKA_MIRROR_TARGET_SASL_USERNAME"
    assert config.target.sasl.password_env == "KAFKA_MIRROR_TARGET_SASL_PASSWORD"
    assert {env.name: env.secret for env in envs} == {
        "KAFKA_MIRROR_SOURCE_TLS_CA": SOURCE_CA,
        "KAFKA_MIRROR_SOURCE_SASL_PASSWORD": SOURCE_PASSWORD,
        "KAFKA_MIRROR_TARGET_SASL_USERNAME": TARGET_USERNAME,
        "KAFKA_MIRROR_TARGET_SASL_PASSWORD": TARGET_PASSWORD,
    }


def test_every_credential_the_config_names_has_a_secret_source() -> None:
    config, envs = worker_config(mirror_spec())
    named = config.source.credential_envs() + config.target.credential_envs()
    assert sorted(named) == sorted(env.name for env in envs)
    assert len({env.name for env in envs}) == len(envs)


def test_plaintext_clusters_need_no_credentials() -> None:
    config, envs = worker_config(plain_spec())
    assert envs == []
    assert config.source.sasl is None
    assert config.source.tls.enabled is False


def test_rendered_config_holds_no_secret_and_loads_back() -> None:
    config, _ = worker_config(mirror_spec())
    text = render_worker_config(config)
    for ref in (SOURCE_PASSWORD, SOURCE_CA, TARGET_USERNAME, TARGET_PASSWORD):
        assert ref.name not in text
        assert ref.key not in text
    assert "passwordEnv: KAFKA_MIRROR_SOURCE_SASL_PASSWORD" in text
    assert WorkerConfig.model_validate(yaml.safe_load(text)) == config


def test_rendered_config_resolves_credentials_from_the_environment_it_names() -> None:
    config, _ = worker_config(mirror_spec())
    loaded = WorkerConfig.model_validate(yaml.safe_load(render_worker_config(config)))
    settings = loaded.source.client_config(
        {"KAFKA_MIRROR_SOURCE_SASL_PASSWORD": "s3cret", "KAFKA_MIRROR_SOURCE_TLS_CA": "PEM"}
    )
    assert settings["security.protocol"] == "SASL_SSL"
    assert (settings["sasl.username"], settings["sasl.password"]) == ("mirror", "s3cret")
    assert settings["ssl.ca.pem"] == "PEM"


def test_config_map_carries_the_rendered_config_under_the_file_name_the_worker_reads() -> None:
    config, _ = worker_config(mirror_spec())
    config_map = build_config_map(NAMESPACE, NAME, config)
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["data"] == {CONFIG_FILE: render_worker_config(config)}


# --- config_checksum -----------------------------------------------------------------------------


def test_checksum_ignores_selections_which_the_workers_reload_live() -> None:
    spec = mirror_spec()
    versions = {"source-credentials": "41"}
    with_two, _ = worker_config(spec, SELECTIONS)
    with_none, _ = worker_config(spec, [])
    with_other, _ = worker_config(
        spec, [SelectionPatterns(name="other", namespace="team-a", includes=["x"], excludes=["y"])]
    )
    checksum = config_checksum(with_two, versions)
    assert config_checksum(with_none, versions) == checksum
    assert config_checksum(with_other, versions) == checksum


@pytest.mark.parametrize(
    "change",
    [
        {"target": {"alias": "B", "bootstrapServers": "kafka-b-new:9092"}},
        {"topicNaming": {"policy": "prefix"}},
        {"topicNaming": {"separator": "_"}},
        {"offsetSyncs": {"maxLag": 7}},
        {"checkpoints": {"enabled": False}},
    ],
    ids=["bootstrapServers", "topicNaming.policy", "topicNaming.separator", "offsetSyncs", "ckpt"],
)
def test_checksum_changes_with_settings_the_workers_read_at_start(change: dict[str, Any]) -> None:
    before, _ = worker_config(plain_spec())
    after, _ = worker_config(plain_spec(**change))
    assert config_checksum(after, {}) != config_checksum(before, {})


def test_checksum_changes_when_a_secret_changes() -> None:
    config, _ = worker_config(mirror_spec())
    before = config_checksum(config, {"source-credentials": "41", "target-credentials": "7"})
    after = config_checksum(config, {"source-credentials": "42", "target-credentials": "7"})
    assert after != before


def test_checksum_does_not_depend_on_the_order_secrets_are_listed() -> None:
    config, _ = worker_config(mirror_spec())
    forward = config_checksum(config, {"a": "1", "b": "2"})
    assert config_checksum(config, {"b": "2", "a": "1"}) == forward


# --- the worker Deployment -----------------------------------------------------------------------


@pytest.mark.parametrize(("paused", "expected"), [(False, 3), (True, 0)])
def test_deployment_runs_spec_replicas_and_none_while_paused(paused: bool, expected: int) -> None:
    dep = deployment(mirror_spec(replicas=3, paused=paused))
    assert dep["spec"]["replicas"] == expected


def test_deployment_runs_the_worker_with_the_mounted_config() -> None:
    spec = mirror_spec()
    config, _ = worker_config(spec)
    config_map = build_config_map(NAMESPACE, NAME, config)
    pod = deployment(spec)["spec"]["template"]["spec"]
    container = only_container(pod)
    assert container["command"] == ["kafka-mirror"]
    assert container["args"] == ["worker", "--config", "/etc/kafka-mirror/worker.yaml"]
    # The --config path is the ConfigMap's key, mounted read-only at the config directory.
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == CONFIG_DIR)
    assert mount["readOnly"] is True
    assert volumes[mount["name"]]["configMap"]["name"] == config_map["metadata"]["name"]
    assert CONFIG_FILE in config_map["data"]


def test_deployment_fills_credentials_only_from_the_operators_copy() -> None:
    container = only_container(deployment(mirror_spec())["spec"]["template"]["spec"])
    env = {e["name"]: e for e in container["env"]}
    # Not the spec's `source-credentials`: a Secret of a name the author chose never reaches a pod.
    assert env["KAFKA_MIRROR_SOURCE_SASL_PASSWORD"] == {
        "name": "KAFKA_MIRROR_SOURCE_SASL_PASSWORD",
        "valueFrom": {
            "secretKeyRef": {
                "name": f"{NAME}-credentials",
                "key": "KAFKA_MIRROR_SOURCE_SASL_PASSWORD",
            }
        },
    }
    credentials = {name: e for name, e in env.items() if name not in WORKER_ENV}
    assert set(credentials) == {
        "KAFKA_MIRROR_SOURCE_TLS_CA",
        "KAFKA_MIRROR_SOURCE_SASL_PASSWORD",
        "KAFKA_MIRROR_TARGET_SASL_USERNAME",
        "KAFKA_MIRROR_TARGET_SASL_PASSWORD",
    }
    assert all("value" not in e and "secretKeyRef" in e["valueFrom"] for e in credentials.values())
    # The only plain value: the allocator the mirroring processes preload.
    assert {name: env[name]["value"] for name in WORKER_ENV} == WORKER_ENV


def test_deployment_probes_health_and_readiness_on_the_metrics_port() -> None:
    container = only_container(deployment(mirror_spec())["spec"]["template"]["spec"])
    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["httpGet"]["path"] == "/healthz"
    assert readiness["httpGet"]["path"] == "/readyz"
    assert probe_port(container, liveness) == METRICS_PORT == 9400
    assert probe_port(container, readiness) == METRICS_PORT


def test_deployment_pods_are_locked_down() -> None:
    pod = deployment(mirror_spec())["spec"]["template"]["spec"]
    security = only_container(pod)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False


def test_deployment_selector_matches_its_pod_template_and_the_label_selector() -> None:
    spec = deployment(mirror_spec())["spec"]
    match_labels: dict[str, str] = spec["selector"]["matchLabels"]
    assert selects(match_labels, spec["template"]["metadata"]["labels"])
    assert match_labels == selector_labels(NAME)
    assert parse_label_selector(label_selector(NAME)) == match_labels
    assert match_labels[MIRROR_LABEL] == NAME


def test_deployment_labels_fit_for_a_mirror_name_at_the_limit() -> None:
    assert len(LONG_NAME) == 63
    spec = deployment(mirror_spec(), name=LONG_NAME)["spec"]
    labels: dict[str, str] = spec["template"]["metadata"]["labels"]
    assert all(len(value) <= LABEL_VALUE_LIMIT for value in labels.values())
    assert parse_label_selector(label_selector(LONG_NAME)) == spec["selector"]["matchLabels"]


def test_deployment_passes_worker_pod_settings_through() -> None:
    spec = mirror_spec(
        worker={
            "image": "registry.example/kafka-mirror:custom",
            "imagePullPolicy": "Always",
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "2"}},
            "nodeSelector": {"pool": "kafka"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"},
                {"key": "flaky", "operator": "Exists", "tolerationSeconds": 30},
            ],
            "annotations": {"team": "payments"},
        }
    )
    template = deployment(spec, checksum="feedfacecafebeef")["spec"]["template"]
    pod = template["spec"]
    container = only_container(pod)
    assert container["image"] == "registry.example/kafka-mirror:custom"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"cpu": "2"},
    }
    assert pod["nodeSelector"] == {"pool": "kafka"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "kafka", "effect": "NoSchedule"},
        {"key": "flaky", "operator": "Exists", "tolerationSeconds": 30},
    ]
    annotations = template["metadata"]["annotations"]
    assert annotations["team"] == "payments"
    assert annotations[CONFIG_CHECKSUM_ANNOTATION] == "feedfacecafebeef"


def test_deployment_defaults_to_the_operator_image_and_omits_unset_pod_settings() -> None:
    dep = deployment(plain_spec())
    pod = dep["spec"]["template"]["spec"]
    container = only_container(pod)
    assert container["image"] == DEFAULT_IMAGE
    assert "resources" not in container
    assert "nodeSelector" not in pod
    assert "tolerations" not in pod
    assert dep["spec"]["template"]["metadata"]["annotations"][CONFIG_CHECKSUM_ANNOTATION]
    _, envs = worker_config(plain_spec())
    overridden = build_deployment(NAMESPACE, NAME, plain_spec(), envs, "c", image="img:1")
    assert only_container(overridden["spec"]["template"]["spec"])["image"] == "img:1"


def test_the_audit_runs_the_audit_image_and_the_workers_the_operator_image() -> None:
    """Only the audit image carries Java and Spark: a worker image named by the spec does not
    become the audit's, nor the other way round."""

    def images(spec: KafkaMirrorSpec) -> tuple[str, str]:
        worker = only_container(deployment(spec)["spec"]["template"]["spec"])["image"]
        audit = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return worker, only_container(audit)["image"]

    assert images(plain_spec()) == (DEFAULT_IMAGE, DEFAULT_AUDIT_IMAGE)
    assert images(plain_spec(worker={"image": "r.example/w:1"})) == (
        "r.example/w:1",
        DEFAULT_AUDIT_IMAGE,
    )
    assert images(plain_spec(audit={"image": "r.example/a:1"})) == (DEFAULT_IMAGE, "r.example/a:1")


def test_a_changed_checksum_changes_the_pod_template() -> None:
    spec = mirror_spec()
    before = deployment(spec, checksum=config_checksum(worker_config(spec)[0], {"s": "1"}))
    after = deployment(spec, checksum=config_checksum(worker_config(spec)[0], {"s": "2"}))
    assert before["spec"]["template"] != after["spec"]["template"]


# --- the audit CronJob and the metrics Service ---------------------------------------------------


def test_audit_cronjob_follows_spec_audit() -> None:
    spec = mirror_spec(audit={"schedule": "15 3 * * *", "suspend": True})
    cronjob = audit_cronjob(spec)["spec"]
    assert cronjob["schedule"] == "15 3 * * *"
    assert cronjob["suspend"] is True
    assert cronjob["concurrencyPolicy"] == "Forbid"
    pod = cronjob["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    container = only_container(pod)
    assert container["command"] == ["kafka-mirror"]
    assert container["args"] == ["audit", "--config", CONFIG_PATH, "--master", "local[*]"]


def test_a_full_audit_request_reaches_the_audit_command() -> None:
    spec = mirror_spec(audit={"fullAuditRequest": "--2026-11-23"})
    pod = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert only_container(pod)["args"][-1] == "--full-request=--2026-11-23"  # one argument


def test_audit_cronjob_defaults_to_every_six_hours_not_suspended() -> None:
    cronjob = audit_cronjob(plain_spec())["spec"]
    assert (cronjob["schedule"], cronjob["suspend"]) == ("0 */6 * * *", False)


def test_audit_pods_read_the_same_config_and_credentials_as_the_workers() -> None:
    spec = mirror_spec()
    worker_pod = deployment(spec)["spec"]["template"]["spec"]
    audit_pod = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    # The same credentials; only the workers preload the allocator (Spark's JVM keeps its own).
    worker_env = only_container(worker_pod)["env"]
    assert only_container(audit_pod)["env"] == [
        e for e in worker_env if e["name"] not in WORKER_ENV
    ]
    volumes = {v["name"]: v for v in audit_pod["volumes"]}
    assert volumes["config"] == next(v for v in worker_pod["volumes"] if v["name"] == "config")
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}  # Spark's spills
    assert only_container(audit_pod)["securityContext"]["readOnlyRootFilesystem"] is True


def test_audit_cronjob_name_fits_for_a_mirror_name_at_the_limit() -> None:
    name = audit_cronjob(mirror_spec(), name=LONG_NAME)["metadata"]["name"]
    assert len(name) <= CRONJOB_NAME_LIMIT == 52
    assert name == fit(f"{LONG_NAME}-audit", CRONJOB_NAME_LIMIT)
    assert re.fullmatch(DNS_LABEL, name)


def test_audit_cronjob_names_of_long_mirrors_stay_unique() -> None:
    other = LONG_NAME[:-1] + "c"
    assert len(other) == 63
    assert audit_cronjob_name(LONG_NAME) != audit_cronjob_name(other)


def test_audit_cronjob_name_of_a_short_mirror_is_readable() -> None:
    assert audit_cronjob(plain_spec())["metadata"]["name"] == "a-to-b-audit"


def test_metrics_service_selects_the_worker_pods_on_port_9400() -> None:
    spec = mirror_spec()
    service = build_metrics_service(NAMESPACE, NAME)
    worker_template = deployment(spec)["spec"]["template"]
    audit_template = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]
    selector: dict[str, str] = service["spec"]["selector"]
    assert selects(selector, worker_template["metadata"]["labels"])
    assert not selects(selector, audit_template["metadata"]["labels"])
    [port] = service["spec"]["ports"]
    assert port["port"] == 9400
    # The target port, by name or number, is the worker container's metrics port.
    target = {"httpGet": {"port": port["targetPort"]}}
    assert probe_port(only_container(worker_template["spec"]), target) == 9400


def test_metrics_service_name_fits_a_dns_label_for_a_mirror_name_at_the_limit() -> None:
    name = build_metrics_service(NAMESPACE, LONG_NAME)["metadata"]["name"]
    assert len(name) <= LABEL_VALUE_LIMIT
    assert re.fullmatch(DNS_LABEL, name)


def test_disruption_budget_covers_the_worker_pods_only() -> None:
    spec = mirror_spec(worker={"disruptionBudget": {"maxUnavailable": 2}})
    budget = build_disruption_budget(NAMESPACE, NAME, spec)
    worker_labels = deployment(spec)["spec"]["template"]["metadata"]["labels"]
    audit_labels = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selects(selector, worker_labels) and not selects(selector, audit_labels["labels"])
    assert budget["spec"]["maxUnavailable"] == 2
    # One worker at a time unless the spec says otherwise: a drain goes on, the mirror stays up.
    assert build_disruption_budget(NAMESPACE, NAME, plain_spec())["spec"]["maxUnavailable"] == 1


def test_audit_pods_are_not_taken_over_by_the_worker_deployment() -> None:
    spec = mirror_spec()
    match_labels = deployment(spec)["spec"]["selector"]["matchLabels"]
    audit_labels = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    assert not selects(match_labels, audit_labels["labels"])


# --- fit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "a-to-b", "x" * 52])
def test_fit_leaves_names_within_the_limit_alone(name: str) -> None:
    assert fit(name, 52) == name


@pytest.mark.parametrize("name", ["x" * 53, LONG_NAME + "-audit", "a" * 42 + "-" + "b" * 40])
def test_fit_shortens_long_names_deterministically(name: str) -> None:
    short = fit(name, 52)
    assert len(short) <= 52
    assert short == fit(name, 52)
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    assert short.endswith(f"-{digest}")
    assert name.startswith(short.removesuffix(f"-{digest}"))
    assert re.fullmatch(DNS_LABEL, short)


def test_fit_keeps_long_names_with_a_common_prefix_apart() -> None:
    first, second = "p" * 70 + "-one", "p" * 70 + "-two"
    assert fit(first, 63) != fit(second, 63)
    assert fit(first, 63)[:50] == fit(second, 63)[:50]


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True))
def test_no_two_mirror_names_share_a_label_value(name: str) -> None:
    """The attack review's: a mirror named as another's shortened label got that mirror's
    selectors (PDB, Service, NetworkPolicy over its pods). Its own name is a label only when it
    fits; a long one's label holds `_`, which no object name does."""
    value = mirror_label(name)
    assert re.fullmatch(LABEL_VALUE, value) and len(value) <= LABEL_VALUE_LIMIT
    assert (value == name) == (len(name) <= LABEL_VALUE_LIMIT)
    assert (value == name) or ("_" in value and name.startswith(value.split("_")[0]))
    assert mirror_label(name + "x") != value


def test_audit_runs_on_the_spec_spark_master_with_its_conf_and_its_own_account() -> None:
    spec = mirror_spec(
        audit={
            "spark": {
                "master": "spark://spark-master.spark.svc:7077",
                "conf": {"spark.sql.shuffle.partitions": "4"},
            }
        }
    )
    pod = audit_cronjob(spec)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    args = only_container(pod)["args"]
    assert args[3:] == [
        "--master",
        "spark://spark-master.spark.svc:7077",
        "--conf",
        "spark.sql.shuffle.partitions=4",
    ]
    assert pod["serviceAccountName"] == f"{NAME}-audit"
    assert pod["automountServiceAccountToken"] is True


def test_the_audit_account_may_only_patch_its_own_mirror_status() -> None:
    account, role, binding = build_audit_rbac(NAMESPACE, NAME, plain_spec())
    assert account["kind"] == "ServiceAccount"
    assert role["rules"] == [
        {
            "apiGroups": ["kafkamirror.io"],
            "resources": ["kafkamirrors/status"],
            "resourceNames": [NAME],
            "verbs": ["get", "patch"],
        }
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == account["metadata"]["name"]


def test_worker_config_carries_the_delivery_and_its_commit_interval() -> None:
    config, _ = worker_config(mirror_spec())
    assert (config.delivery, config.commit_interval_seconds) == ("atLeastOnce", 1.0)
    config, _ = worker_config(mirror_spec(delivery="exactlyOnce", commitIntervalSeconds=0.5))
    assert (config.delivery, config.commit_interval_seconds) == ("exactlyOnce", 0.5)


def test_the_operators_own_clients_take_no_tuning_of_the_mirror() -> None:
    """The mirror's fetch and queue sizes (2 GiB of queue, say) are its workers': the operator's
    probe consumers keep small fixed ones, and mirrors differing only there share a reader."""
    tuning = {"queued.max.messages.kbytes": "2097151", "client.rack": "rack-7"}
    plain = mirror_spec().model_dump(by_alias=True, exclude_none=True)
    tuned = KafkaMirrorSpec.model_validate(
        {**plain, "source": {**plain["source"], "config": tuning}}
    )
    config, _ = worker_config(tuned)
    environ = {"KAFKA_MIRROR_SOURCE_SASL_PASSWORD": "s3cret", "KAFKA_MIRROR_SOURCE_TLS_CA": "PEM"}
    workers = config.source.client_config(environ)
    operator = config.source.client_config(environ, tuning=False)
    assert workers["queued.max.messages.kbytes"] == "2097151" and workers["client.rack"] == "rack-7"
    assert {k: v for k, v in workers.items() if k not in tuning} == operator
