"""A mirror's owner bounds what the teams' selections copy (`spec.selectionPolicy`), on the real
API server and Kafka: a user who may write MirrorTopicSelection objects and nothing else
(impersonated) selects `.*`; under the mirror's grants, team A's selection matches only team A's
topics, and a selection no grant names matches nothing and says so. Grants to namespaces hold
against any name: a tenant of another namespace who names a selection to fit a grant by name
gets only what its namespace is granted. The workers' configuration (the ConfigMap they read)
carries the same bounds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.kafka import create_topics
from tests.helpers.objects import condition, get_custom, mirror, selection
from tests.helpers.stack import MirrorStack, run_operator
from tests.helpers.tenant import impersonating
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


@pytest.fixture
def team(
    kube_api: client.ApiClient, kube_apiserver: KubeApiServer, namespace: str
) -> Iterator[client.ApiClient]:
    api = impersonating(
        kube_api, kube_apiserver.kubeconfig, namespace, "a-team", "mirrortopicselections"
    )
    yield api
    api.close()


@pytest.mark.usefixtures("operator")
def test_a_teams_selection_of_everything_copies_only_what_the_mirror_grants_it(
    kube_api: client.ApiClient, namespace: str, stack: MirrorStack, team: client.ApiClient
) -> None:
    run = uuid.uuid4().hex[:6]
    team_a, team_b = [f"team-a.{run}.orders", f"team-a.{run}.invoices"], [f"team-b.{run}.orders"]
    create_topics(stack.kafka_a.bootstrap_servers, [*team_a, *team_b], partitions=1)
    grants = [{"selections": ["team-a-*"], "topics": [f"team-a\\.{run}\\..*"]}]
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(kube_api, mirror("m", namespace, source, target, selectionPolicy=grants))
    objects = client.CustomObjectsApi(team)
    for name in ("team-a-all", "team-c-all"):
        body = selection(name, namespace, "m", [".*"])
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "mirrortopicselections", body
        )

    def status(name: str) -> dict[str, object]:
        return dict(get_custom(team, namespace, "mirrortopicselections", name).get("status") or {})

    wait_for(
        lambda: status("team-a-all").get("matchedTopics") == sorted(team_a),
        60,
        lambda: f"team A's selection to match its topics: {status('team-a-all')}",
    )
    wait_for(
        lambda: (
            condition(
                get_custom(team, namespace, "mirrortopicselections", "team-c-all"), "Ready"
            ).get("reason")
            == "NotGranted"
        ),
        60,
        lambda: f"team C's selection to say it is granted nothing: {status('team-c-all')}",
    )
    assert status("team-c-all").get("matchedTopicCount") == 0

    # The workers' configuration follows within a status tick: a selection's status is its
    # own, and the mirror's next converge (its handler's, or the tick's) writes the ConfigMap.
    wait_for(
        lambda: (
            configured(kube_api, namespace)
            == {"team-a-all": [f"team-a\\.{run}\\..*"], "team-c-all": []}
        ),
        60,
        lambda: (
            "both selections in the workers' configuration, within their grants: "
            f"{configured(kube_api, namespace)}"
        ),
    )


def configured(kube_api: client.ApiClient, namespace: str) -> dict[str, object]:
    """Each selection in the workers' configuration, by name, with its bound."""
    config = client.CoreV1Api(kube_api).read_namespaced_config_map("m-worker-config", namespace)
    selections = yaml.safe_load(config.data["worker.yaml"])["selections"]
    return {
        s["name"] if s["namespace"] == namespace else f"{s['namespace']}/{s['name']}": s["within"]
        for s in selections
    }


def test_a_selection_named_to_fit_a_grant_gets_only_what_its_namespace_is_granted(
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    other_namespaces: list[str],
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    team_b, team_c = other_namespaces
    watched = ("--namespace", team_b, "--namespace", team_c)
    operator = OperatorProcess(kube_apiserver.kubeconfig, namespace, tmp_path, extra_args=watched)
    running = run_operator(operator)
    next(running)
    run = uuid.uuid4().hex[:6]
    a_topics, b_topics = [f"team-a.{run}.orders"], [f"team-b.{run}.orders"]
    create_topics(stack.kafka_a.bootstrap_servers, [*a_topics, *b_topics], partitions=1)
    grants = [
        {"selections": ["team-a-*"], "topics": [f"team-a\\.{run}\\..*"]},
        {"namespaces": [team_b], "topics": [f"team-b\\.{run}\\..*"]},
    ]
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(kube_api, mirror("m", namespace, source, target, selectionPolicy=grants))
    tenants = {
        ns: impersonating(
            kube_api, kube_apiserver.kubeconfig, ns, f"{ns}-team", "mirrortopicselections"
        )
        for ns in (team_b, team_c)
    }
    try:
        for ns, api in tenants.items():
            # Named to fit the grant by name of the mirror's own namespace, selecting everything.
            body = selection("team-a-all", ns, "m", [".*"])
            body["spec"]["mirrorNamespace"] = namespace
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, VERSION, ns, "mirrortopicselections", body
            )

        def status(ns: str) -> dict[str, object]:
            found = get_custom(tenants[ns], ns, "mirrortopicselections", "team-a-all")
            return dict(found.get("status") or {})

        wait_for(
            lambda: status(team_b).get("matchedTopics") == b_topics,
            60,
            lambda: f"team B's selection to match team B's topics only: {status(team_b)}",
        )
        wait_for(
            lambda: (
                condition(
                    get_custom(tenants[team_c], team_c, "mirrortopicselections", "team-a-all"),
                    "Ready",
                ).get("reason")
                == "NotGranted"
            ),
            60,
            lambda: f"team C's selection to say it is granted nothing: {status(team_c)}",
        )
        assert status(team_c).get("matchedTopicCount") == 0
        # Team C's, granted nothing, is not even in the mirror's configuration.
        wanted = {f"{team_b}/team-a-all": [f"team-b\\.{run}\\..*"]}
        wait_for(
            lambda: configured(kube_api, namespace) == wanted,
            60,
            lambda: (
                f"the selections of both namespaces, within their grants: "
                f"{configured(kube_api, namespace)}"
            ),
        )
    finally:
        for api in tenants.values():
            api.close()
        next(running, None)


@pytest.mark.usefixtures("operator")
def test_selections_too_large_for_the_workers_configuration_are_refused_on_themselves(
    kube_api: client.ApiClient, namespace: str, stack: MirrorStack, team: client.ApiClient
) -> None:
    """Three selections of about 180 KiB each (a ConfigMap holds 1 MiB): the two oldest are in
    the workers' configuration and the mirror converges; the newest says it is TooLarge."""
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(kube_api, mirror("m", namespace, source, target))
    objects = client.CustomObjectsApi(team)
    for name in ("first", "second", "third"):
        patterns = [f"{name}-{i}-" + "x" * 690 for i in range(256)]
        body = selection(name, namespace, "m", patterns)
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "mirrortopicselections", body
        )
    # Their ages tie within the API server's second; then their names order them.

    def ready_of(name: str) -> dict[str, object]:
        return condition(get_custom(team, namespace, "mirrortopicselections", name), "Ready")

    wait_for(
        lambda: ready_of("third").get("reason") == "TooLarge",
        60,
        lambda: f"the newest selection to say it does not fit: {ready_of('third')}",
    )
    assert set(configured(kube_api, namespace)) == {"first", "second"}
    state = get_custom(kube_api, namespace, "kafkamirrors", "m")
    assert condition(state, "Ready").get("reason") != "InvalidSpec", state.get("status")
