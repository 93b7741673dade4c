"""The status loop's listing against the real API server: every object of every page, each kept
without what a refresh never reads (issue 67: the tick's listing of a thousand mirrors, their
managed fields and kopf's copy of each spec, was the operator's memory peak)."""

from __future__ import annotations

import pytest
from kubernetes import client

from kafka_mirror.api.models import GROUP
from kafka_mirror.controller import refresh
from kafka_mirror.controller.reconcile import SELECTIONS
from kafka_mirror.kube import apply
from tests.helpers.objects import selection

pytestmark = pytest.mark.kube

LAST_HANDLED = f"{GROUP}/last-handled-configuration"


def test_the_listing_holds_every_page_and_drops_what_no_refresh_reads(
    kube_api: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"s{n}" for n in range(7)]
    for name in names:
        listed = selection(name, namespace, "m", ["t"])
        listed["metadata"]["annotations"] = {LAST_HANDLED: "{}" * 500, "team": "payments"}
        apply(kube_api, listed)
    monkeypatch.setattr(refresh, "LIST_PAGE", 3)  # three pages, the last one short

    found = refresh.namespaced_lister(kube_api, [namespace])(SELECTIONS)

    assert sorted(raw["metadata"]["name"] for raw in found) == names
    for raw in found:
        assert "managedFields" not in raw["metadata"]
        assert raw["metadata"]["annotations"] == {"team": "payments"}
        assert raw["spec"]["includes"] == ["t"] and raw["metadata"]["uid"]
