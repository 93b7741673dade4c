"""Hundreds of malformed and hostile specs (hypothesis) against the models and the rendering:
each is refused with a message naming the field, or it renders children in which the
operator's own settings still win. Catastrophic patterns stay fast. The same specs go to the
real API server and operator in tests/integration/test_hostile_input.py."""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from pydantic import ValidationError

from kafka_mirror import render
from kafka_mirror.api.models import (
    KafkaMirrorSpec,
    MirrorTopicSelectionSpec,
    is_forbidden_config_key,
)
from kafka_mirror.render import Selection
from kafka_mirror.topics import Selection as TopicSelection
from kafka_mirror.topics import TopicNamer, plan_topics
from tests.helpers.hostile import base_mirror, base_selection, mutated

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Names a catastrophic pattern would take exponential time on with a backtracking engine.
TOPICS = ["a" * n for n in range(1, 250, 7)] + ["a" * 100 + "!", "orders.x", "ü" * 60]


def refused_with_a_message(error: ValidationError) -> bool:
    return all(e["loc"] and e["msg"] for e in error.errors())


@FUZZ
@given(mutated(base_mirror("kafka-a:9092", "kafka-b:9092")))
def test_a_hostile_mirror_is_refused_or_renders_with_the_operators_settings_winning(
    doc: dict[str, Any],
) -> None:
    try:
        spec = KafkaMirrorSpec.model_validate(doc)
    except ValidationError as error:
        assert refused_with_a_message(error), error
        event("refused")
        return
    event("accepted")
    selections = [Selection("s", (".*",), ())]
    config, envs = render.build_worker_config("ns", "m", spec, selections)
    deployment = render.build_deployment("ns", "m", spec, envs, "0123abcd", "image:1")
    cronjob = render.build_audit_cronjob("ns", "m", spec, envs, "image:1")
    config_map = render.build_config_map("ns", "m", config)
    json.dumps([deployment, cronjob, config_map])  # serialisable for the API server
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"][render.CONFIG_CHECKSUM_ANNOTATION] == "0123abcd"
    assert template["metadata"]["labels"] == render.selector_labels("m")
    for cluster in (config.source, config.target):
        settings = cluster.client_config(environ=dict.fromkeys(cluster.credential_envs(), "x"))
        assert settings["bootstrap.servers"] == cluster.bootstrap_servers
        protocol = ("SASL_" if cluster.sasl else "") + (
            "SSL" if cluster.tls.enabled else "PLAINTEXT"
        )
        assert settings["security.protocol"] == protocol  # as the tls and sasl sections say
        assert not [k for k in cluster.config if is_forbidden_config_key(k)]


@FUZZ
@given(mutated(base_selection("m")))
def test_a_hostile_selection_is_refused_or_matches_in_bounded_time(doc: dict[str, Any]) -> None:
    try:
        spec = MirrorTopicSelectionSpec.model_validate(doc)
    except ValidationError as error:
        assert refused_with_a_message(error), error
        event("refused")
        return
    event("accepted")
    started = time.monotonic()
    plan_topics(
        TOPICS, [TopicSelection(tuple(spec.includes), tuple(spec.excludes))], TopicNamer("A"), "B"
    )
    assert time.monotonic() - started < 1.0
