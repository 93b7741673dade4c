"""A planned switchover in one change, and the whole cycle from a GitOps repository, driven the
way a person at 3 a.m. can without PySpark or a JVM: `kubectl apply` of the repository's
manifests at each commit, and `kubectl wait --for=jsonpath=…` on the status.

The repository holds both mirrors from the start: `a-to-b`, and `b-to-a` standing by for it
(`spec.standbyFor`). Commit 1 applies both (in the order `kubectl apply -f DIR` reads them,
`b-to-a` first): only `a-to-b` runs. Commit 2 adds the Promote of `a-to-b`, the whole
switchover: it catches up, hands the group to B, and `b-to-a` starts by itself. Commit 3 adds the
Return of `b-to-a`: it catches up, hands the group back to A, stops and starts `a-to-b` again.
Then the next cycle with both operations kept in the files, only their ids changed: commit 4
(Promote move-2) starts b-to-a though its spec still names its old Return, commit 5 (Return
back-2) starts a-to-b again. Commit 6 removes both operations: the pair is as after commit 1.
Judged from Kafka by content: the application reads every record written on A and B."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.dr import (
    MAX_LAG,
    PARTITIONS,
    application,
    checkpoints_follow,
    remote_values,
    values,
    workers_stopped,
)
from tests.helpers.kafka import create_topics, produce, unique
from tests.helpers.kubectl import Kubectl
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]

ON_B = 2_000  # records written on B between the switchover and the return
WAIT = "--timeout=240s"
SWITCHES = 4  # A to B and back, twice: each may re-read up to the bound per partition


def repository(stack: NodeStack, topic: str) -> dict[str, dict[str, Any]]:
    """The GitOps repository's manifests, by file name (applied in this order)."""
    a = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    b = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    ns, sync = stack.namespace, {"offsetSyncs": {"maxLag": MAX_LAG}}
    return {
        "1-b-to-a.yaml": mirror(
            "b-to-a", ns, {**b, "alias": "B"}, {**a, "alias": "A"}, standbyFor="a-to-b", **sync
        ),
        "2-failback.yaml": selection("failback", ns, "b-to-a", [re.escape(topic)], (".*\\.A",)),
        "3-a-to-b.yaml": mirror("a-to-b", ns, a, b, reverse="b-to-a", **sync),
        "4-app-topics.yaml": selection("app-topics", ns, "a-to-b", [re.escape(topic)]),
    }


def commit(kc: Kubectl, directory: Path, manifests: dict[str, dict[str, Any]]) -> None:
    """What a GitOps tool does with a commit: apply every file of the repository."""
    for name, manifest in manifests.items():
        (directory / name).write_text(yaml.safe_dump(manifest))
    kc("apply", "-f", str(directory))


def reason_is(kc: Kubectl, name: str, condition: str, reason: str) -> None:
    path = f"{{.status.conditions[?(@.type=='{condition}')].reason}}"
    kc("wait", f"kafkamirror/{name}", f"--for=jsonpath={path}={reason}", WAIT, timeout=300)


def completed(kc: Kubectl, name: str) -> None:
    kc(
        "wait",
        f"kafkamirror/{name}",
        "--for=jsonpath={.status.operation.phase}=Completed",
        WAIT,
        timeout=300,
    )


def test_a_switchover_is_one_change_and_the_cycle_runs_from_the_repository_in_any_order(
    node_stack: NodeStack, node_kc: Kubectl, tmp_path: Path
) -> None:
    a, b, kc = node_stack.kafka_a, node_stack.kafka_b, node_kc
    api, namespace = node_stack.api, node_stack.namespace
    t, app = unique("dr-"), unique("app-")
    create_topics(a.bootstrap_servers, [t], partitions=PARTITIONS)
    produce(a.bootstrap_servers, t, values(t, 0, 300))
    manifests = repository(node_stack, t)

    # Commit 1: both mirrors. b-to-a stands by and has no worker; the application reads on A.
    commit(kc, tmp_path, manifests)
    read_before = application(a, app, [t], limit=200)
    reason_is(kc, "b-to-a", "Ready", "Standby")
    kc("wait", "kafkamirror/a-to-b", "--for=condition=Ready", WAIT, timeout=300)
    assert workers_stopped(api, namespace, "b-to-a")
    produce(a.bootstrap_servers, t, values(t, 300, 100))
    assert len(remote_values(b, f"{t}.A", 400)) == 400
    checkpoints_follow(b, a, app, t)
    produce(a.bootstrap_servers, t, values(t, 400, 50))  # a backlog at the switchover

    # Commit 2, the switchover: a-to-b's Promote. b-to-a starts once it completes.
    manifests["3-a-to-b.yaml"]["spec"]["operation"] = {"type": "Promote", "id": "move"}
    commit(kc, tmp_path, manifests)
    completed(kc, "a-to-b")
    kc("wait", "kafkamirror/b-to-a", "--for=condition=Ready", WAIT, timeout=300)
    read_on_b = application(b, app, [f"{t}.A"], limit=None)
    create_topics(b.bootstrap_servers, [t], partitions=PARTITIONS)
    produce(b.bootstrap_servers, t, values(f"{t}-on-b", 0, ON_B))
    read_on_b += application(b, app, [t], limit=100)

    # Commit 3, the return: b-to-a's Return starts a-to-b again and stops b-to-a.
    manifests["1-b-to-a.yaml"]["spec"]["operation"] = {
        "type": "Return",
        "id": "back",
        "resume": "a-to-b",
    }
    commit(kc, tmp_path, manifests)
    completed(kc, "b-to-a")
    reason_is(kc, "a-to-b", "OperationDone", "Resumed")
    kc("wait", "kafkamirror/a-to-b", "--for=condition=Ready", WAIT, timeout=300)
    assert workers_stopped(api, namespace, "b-to-a")
    assert remote_values(a, f"{t}.B", ON_B) == {r.value for r in values(f"{t}-on-b", 0, ON_B)}
    read_on_a = application(a, app, [f"{t}.B"], limit=None)
    read_on_a += application(a, app, [t], limit=None)

    # The next cycle with the operations kept in the files: only their ids change. After its
    # Return, b-to-a stands by though its spec names the Return; a-to-b mirrors on.
    reason_is(kc, "b-to-a", "Ready", "Standby")
    produce(a.bootstrap_servers, t, values(t, 450, 50))
    read_on_a += application(a, app, [t], limit=None)
    assert remote_values(b, f"{t}.A", 500) == {r.value for r in values(t, 0, 500)}
    assert workers_stopped(api, namespace, "b-to-a")
    # Commit 4, the second switchover: a-to-b's Promote move-2. b-to-a runs again, its old
    # Return still in its spec, and mirrors B's writes to A.
    manifests["3-a-to-b.yaml"]["spec"]["operation"] = {"type": "Promote", "id": "move-2"}
    commit(kc, tmp_path, manifests)
    completed(kc, "a-to-b")
    reason_is(kc, "b-to-a", "Ready", "Mirroring")
    read_on_b += application(b, app, [f"{t}.A"], limit=None)
    read_on_b += application(b, app, [t], limit=None)
    produce(b.bootstrap_servers, t, values(f"{t}-on-b", ON_B, ON_B))
    read_on_b += application(b, app, [t], limit=100)
    # Commit 5, the second return: b-to-a's Return back-2.
    manifests["1-b-to-a.yaml"]["spec"]["operation"]["id"] = "back-2"
    commit(kc, tmp_path, manifests)
    completed(kc, "b-to-a")
    reason_is(kc, "a-to-b", "OperationDone", "Resumed")
    assert remote_values(a, f"{t}.B", 2 * ON_B) == {
        r.value for r in values(f"{t}-on-b", 0, 2 * ON_B)
    }
    read_on_a += application(a, app, [f"{t}.B"], limit=None)
    read_on_a += application(a, app, [t], limit=None)

    # Commit 6: the operations removed from the repository. a-to-b mirrors on; b-to-a stands
    # by, ready for the next switchover.
    for name in ("1-b-to-a.yaml", "3-a-to-b.yaml"):
        del manifests[name]["spec"]["operation"]
    commit(kc, tmp_path, manifests)
    reason_is(kc, "b-to-a", "Ready", "Standby")
    produce(a.bootstrap_servers, t, values(t, 500, 50))
    read_on_a += application(a, app, [t], limit=None)
    assert remote_values(b, f"{t}.A", 550) == {r.value for r in values(t, 0, 550)}
    assert workers_stopped(api, namespace, "b-to-a")

    produced = {r.value or b"" for r in [*values(t, 0, 550), *values(f"{t}-on-b", 0, 2 * ON_B)]}
    read = Counter([*read_before, *read_on_b, *read_on_a])
    unread = produced - set(read)
    assert not unread, f"{len(unread)} records never read, e.g. {sorted(unread)[:3]}"
    assert sum(n - 1 for n in read.values()) <= SWITCHES * MAX_LAG * PARTITIONS
