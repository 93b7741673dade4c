"""Hundreds of malformed and hostile specs (hypothesis) against the models, the installer's
allow-lists and the rendering: each is refused with a message naming the field, or reported as
not allowed (naming the field and the flag that would allow it), or it renders children in
which the operator's own settings still win and only allowed values appear. Catastrophic
patterns stay fast. The same specs go to the real API server and operator in
tests/integration/test_hostile_input.py."""

from __future__ import annotations

import json
import time
from typing import Any

from hypothesis import event, given, settings
from pydantic import ValidationError

from kafka_mirror import render, render_audit
from kafka_mirror.api.allowed import CLIENT_CONFIG, SPARK_CONF
from kafka_mirror.api.models import KafkaMirrorSpec, MirrorTopicSelectionSpec
from kafka_mirror.api.policy import AllowLists, not_allowed
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.topics import NameFilter, TopicNamer, plan_topics
from tests.helpers.hostile import base_mirror, base_selection, mutated

FUZZ = settings(max_examples=400)
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
    outside = not_allowed(spec, AllowLists(), (render.DEFAULT_IMAGE, render.DEFAULT_AUDIT_IMAGE))
    if outside:  # the operator renders nothing for it (tests/unit/test_policy.py)
        assert all(r.field.startswith("spec.") and r.flag.startswith("--") for r in outside)
        event("not allowed")
        return
    event("accepted")
    selections = [SelectionPatterns(name="s", includes=[".*"], excludes=[])]
    config, envs = render.build_worker_config("ns", "m", spec, selections)
    deployment = render.build_deployment("ns", "m", spec, envs, "0123abcd", render.DEFAULT_IMAGE)
    cronjob = render_audit.build_audit_cronjob("ns", "m", spec, envs, render.DEFAULT_IMAGE)
    config_map = render.build_config_map("ns", "m", config)
    json.dumps([deployment, cronjob, config_map])  # serialisable for the API server
    template = deployment["spec"]["template"]
    for pod in (template["spec"], cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        assert pod["containers"][0]["image"] == render.DEFAULT_IMAGE
    audit_args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert audit_args[audit_args.index("--master") + 1].startswith("local")
    confs = [audit_args[i + 1] for i, arg in enumerate(audit_args) if arg == "--conf"]
    assert all(SPARK_CONF.allows(conf.split("=", 1)[0]) for conf in confs)
    assert template["metadata"]["annotations"][render.CONFIG_CHECKSUM_ANNOTATION] == "0123abcd"
    assert template["metadata"]["labels"] == render.selector_labels("m")
    for cluster in (config.source, config.target):
        settings = cluster.client_config(environ=dict.fromkeys(cluster.credential_envs(), "x"))
        assert settings["bootstrap.servers"] == cluster.bootstrap_servers
        protocol = ("SASL_" if cluster.sasl else "") + (
            "SSL" if cluster.tls.enabled else "PLAINTEXT"
        )
        assert settings["security.protocol"] == protocol  # as the tls and sasl sections say
        assert all(CLIENT_CONFIG.allows(k) for k in cluster.config)


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
        TOPICS, [NameFilter(tuple(spec.includes), tuple(spec.excludes))], TopicNamer("A"), "B"
    )
    assert time.monotonic() - started < 30  # a backtracking engine would take ages; see test_topics
