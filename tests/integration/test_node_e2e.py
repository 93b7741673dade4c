"""The end-to-end suite on the real node (kafka_mirror_dev.node): the chart installed with the image
built here, its operator a pod under its ServiceAccount and the chart's RBAC, the examples
applied and mirroring A→B through worker pods the kubelet runs, then what only a cluster does —
scaling, a Secret's rotation rolling the pods, the CronJob controller firing the audit, the
garbage collector cleaning up a deleted mirror, the Deployment recreating a deleted operator.
The mirroring is judged by `kafka_mirror.smoke`, the check `dev/kind/e2e.sh` runs on kind."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kubernetes import client

from kafka_mirror import smoke
from kafka_mirror.kube import apply
from kafka_mirror.render import (
    CONFIG_CHECKSUM_ANNOTATION,
    IMAGE_USER,
    MIRROR_LABEL,
    label_selector,
)
from kafka_mirror_dev.demo import example_objects
from kafka_mirror_dev.kafka import SCRAM_MECHANISM, SCRAM_PASSWORD, SCRAM_USER, LocalKafka
from kafka_mirror_dev.node import KubeNode
from tests.helpers.content import check_content
from tests.helpers.helm import CHART, run_helm
from tests.helpers.kubectl import Kubectl
from tests.helpers.objects import secret
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.node, pytest.mark.kafka, pytest.mark.helm]

RELEASE = "kafka-mirror-operator"  # the chart's full name is then the release name
MIRROR = "a-to-b"  # the example's name
LOGIN = "source-login"
WORKERS = label_selector(MIRROR)
OPERATOR = f"app.kubernetes.io/instance={RELEASE}"


def _delete_topics(cluster: LocalKafka, topics: Sequence[str]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    present = [t for t in topics if t in admin.list_topics(timeout=10).topics]
    for future in admin.delete_topics(present).values() if present else ():
        future.result()
    wait_for(
        lambda: not set(topics) & set(admin.list_topics(timeout=10).topics),
        60,
        f"{', '.join(present)} to be deleted",
    )


def _examples(a: LocalKafka, b: LocalKafka, namespace: str) -> list[dict[str, Any]]:
    """The examples, the source reached over SCRAM with the password from a Secret (so that
    rotating it has something to roll) and the audit due every minute."""
    mirror, selection = example_objects(a.sasl_bootstrap_servers, b.bootstrap_servers, namespace)
    mirror["spec"]["source"]["sasl"] = {
        "mechanism": SCRAM_MECHANISM,
        "username": SCRAM_USER,
        "passwordSecret": {"name": LOGIN, "key": "password"},
    }
    mirror["spec"]["audit"] = {"schedule": "* * * * *", "spark": {"master": "local[1]"}}
    return [secret(LOGIN, namespace, password=SCRAM_PASSWORD), mirror, selection]


class Cluster:
    """What the test reads of the node's API server, in its namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.batch, self.custom = client.BatchV1Api(api), client.CustomObjectsApi(api)

    def pods(self, selector: str) -> list[Any]:
        found = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return [p for p in found if p.metadata.deletion_timestamp is None]

    def ready(self, selector: str) -> list[str]:
        """The names of the selected pods whose every container is ready."""
        return [
            p.metadata.name
            for p in self.pods(selector)
            if p.status.container_statuses and all(c.ready for c in p.status.container_statuses)
        ]

    def status(self) -> dict[str, Any]:
        return dict(smoke.read_mirror(self.api, self.namespace, MIRROR).get("status", {}))

    def left_of_the_mirror(self) -> list[str]:
        """Every object of the mirror's still there: all carry its label."""
        selector = f"{MIRROR_LABEL}={MIRROR}"
        listings: list[Callable[..., Any]] = [
            self.apps.list_namespaced_deployment,
            self.apps.list_namespaced_replica_set,
            self.core.list_namespaced_pod,
            self.core.list_namespaced_config_map,
            self.core.list_namespaced_service,
            self.core.list_namespaced_service_account,
            self.batch.list_namespaced_cron_job,
            self.batch.list_namespaced_job,
            client.RbacAuthorizationV1Api(self.api).list_namespaced_role,
            client.RbacAuthorizationV1Api(self.api).list_namespaced_role_binding,
        ]
        return [
            f"{type(item).__name__} {item.metadata.name}"
            for listing in listings
            for item in listing(self.namespace, label_selector=selector).items
        ]

    def explain(self, pods: list[Any]) -> str:
        """Each pod's phase, its containers' state and the end of their logs."""
        lines = []
        for pod in pods:
            lines.append(f"----- pod {pod.metadata.name}: {pod.status.phase}")
            for c in pod.status.container_statuses or []:
                lines.append(f"  {c.name}: restarts {c.restart_count}, state {c.state}")
                try:
                    log = self.core.read_namespaced_pod_log(
                        pod.metadata.name, self.namespace, container=c.name, tail_lines=60
                    )
                except client.ApiException as error:
                    log = f"(no log: {error.reason})"
                lines.append(log)
        return "\n".join(lines)

    def diagnostics(self) -> str:
        lines = [self.explain(self.core.list_namespaced_pod(self.namespace).items)]
        events = self.core.list_namespaced_event(self.namespace).items
        lines += [f"event {e.involved_object.name}: {e.reason}: {e.message}" for e in events]
        lines.append(f"mirror status: {self.status()}")
        return "\n".join(lines)


def _check_security(pod: Any, image: str) -> None:
    """A pod as the operator rendered it: our image, non-root, a read-only root filesystem, no
    capabilities, and no restart."""
    assert pod.spec.security_context.run_as_user == IMAGE_USER
    assert pod.spec.security_context.run_as_non_root
    (container,) = pod.spec.containers
    assert container.image == image
    assert container.security_context.read_only_root_filesystem
    assert not container.security_context.allow_privilege_escalation
    assert container.security_context.capabilities.drop == ["ALL"]
    assert [c.restart_count for c in pod.status.container_statuses] == [0]


@pytest.mark.timeout(1800)
def test_the_chart_mirrors_scales_rolls_audits_and_cleans_up_on_the_real_node(
    kube_node: KubeNode,
    node_api: client.ApiClient,
    node_namespace: str,
    node_kafka_a: LocalKafka,
    node_kafka_b: LocalKafka,
    helm: Path,
    kubectl: Path,
    tmp_path: Path,
) -> None:
    namespace, cluster = node_namespace, Cluster(node_api, node_namespace)
    kc = Kubectl(kubectl, kube_node.kubeconfig, namespace)
    a, b = node_kafka_a, node_kafka_b
    repository, tag = kube_node.image.rsplit(":", 1)
    out = io.StringIO()
    try:
        # The operator: the chart's Deployment, its pod under the chart's ServiceAccount.
        run_helm(
            helm,
            tmp_path,
            *("install", RELEASE, str(CHART), "--namespace", namespace),
            *("--set", f"image.repository={repository},image.tag={tag}"),
            *("--set", "image.pullPolicy=Never,statusInterval=2"),
            *("--wait", "--timeout", "3m"),
            kubeconfig=kube_node.kubeconfig,
        )
        (operator,) = cluster.pods(OPERATOR)
        assert operator.spec.service_account_name == RELEASE
        assert operator.spec.containers[0].image == kube_node.image
        # `helm test`: its pod reaches the operator's metrics through the chart's Service.
        tested = run_helm(
            helm,
            tmp_path,
            *("test", RELEASE, "--namespace", namespace, "--logs", "--timeout", "3m"),
            kubeconfig=kube_node.kubeconfig,
        )
        assert "operator metrics present" in tested, tested

        # The examples: worker pods as rendered, mirroring A→B until the status says all is
        # there; then every record compared by content. The session's Kafka pair is shared
        # (the demo's test mirrors the same topics): start from none of them.
        _delete_topics(a, smoke.SELECTED)
        _delete_topics(b, [f"{topic}.A" for topic in smoke.SELECTED])
        for body in _examples(a, b, namespace):
            apply(node_api, body)
        clusters = smoke.Clusters(a.bootstrap_servers, b.bootstrap_servers)
        assert smoke.run(node_api, namespace, MIRROR, clusters, out, timeout=300), out.getvalue()
        (worker,) = cluster.pods(WORKERS)
        _check_security(worker, kube_node.image)
        (container,) = worker.spec.containers
        assert container.liveness_probe.http_get and container.readiness_probe.http_get
        assert not worker.spec.automount_service_account_token
        assert cluster.ready(WORKERS) == [worker.metadata.name]
        remote = {topic: f"{topic}.A" for topic in smoke.SELECTED}
        report = check_content(a.bootstrap_servers, b.bootstrap_servers, remote)
        assert report.lossless and report.source_records == 2 * smoke.SAMPLE_RECORDS, report

        # The operator's pod deleted while a scale-out waits for it: its Deployment makes a
        # new one, which picks the change up.
        cluster.core.delete_namespaced_pod(operator.metadata.name, namespace)
        kc("scale", f"kafkamirror/{MIRROR}", "--replicas=2")
        wait_for(
            lambda: any(p.metadata.name != operator.metadata.name for p in cluster.pods(OPERATOR)),
            60,
            "the operator's Deployment recreating its pod",
        )
        wait_for(lambda: len(cluster.ready(WORKERS)) == 2, 180, "two worker pods Ready")
        for pod in cluster.pods(WORKERS):
            _check_security(pod, kube_node.image)
        assert smoke.wait_until_mirrored(node_api, namespace, MIRROR, out, 120), out.getvalue()

        # A rotated Secret rolls the pods (its resourceVersion is in the pods' checksum).
        before = {p.metadata.name: p.metadata.annotations for p in cluster.pods(WORKERS)}
        rotated = secret(LOGIN, namespace, password=SCRAM_PASSWORD, rotated="1")
        cluster.core.replace_namespaced_secret(LOGIN, namespace, rotated)

        def rolled() -> bool:
            ready = cluster.ready(WORKERS)
            return len(ready) == 2 and not set(ready) & set(before)

        wait_for(rolled, 240, "both worker pods replaced after the Secret changed")
        (old_checksum,) = {a[CONFIG_CHECKSUM_ANNOTATION] for a in before.values()}
        for pod in cluster.pods(WORKERS):
            assert pod.metadata.annotations[CONFIG_CHECKSUM_ANNOTATION] != old_checksum
        # More traffic, after the roll (the status says lag 0 already: wait for B itself).
        smoke.produce_sample_traffic(a.bootstrap_servers, out)
        wait_for(
            lambda: not smoke.check_remote_topics(clusters, io.StringIO()),
            180,
            "the traffic produced after the roll on B",
        )
        assert smoke.wait_until_mirrored(node_api, namespace, MIRROR, out, 60), out.getvalue()
        report = check_content(a.bootstrap_servers, b.bootstrap_servers, remote)
        assert report.lossless and report.source_records == 4 * smoke.SAMPLE_RECORDS, report

        # The audit: a Job the CronJob controller makes at the next minute; Spark in it as
        # a non-root user on a read-only root filesystem; its summary in the status, from a
        # run started after all of the above was mirrored.
        caught_up = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        wait_for(
            lambda: cluster.status().get("lastAudit", {}).get("time", "") > caught_up,
            300,
            "status.lastAudit from an audit Job started after the traffic was mirrored",
        )
        audit = cluster.status()["lastAudit"]
        assert audit["result"] == "Passed", audit
        assert audit["recordsChecked"] >= 2 * smoke.SAMPLE_RECORDS
        assert audit["missing"] == audit["duplicates"] == 0
        # Its pod ends after writing the status; the next minute's run may be under way
        # already; none failed, though they ran while the traffic flowed.
        selector = f"{MIRROR_LABEL}={MIRROR},app.kubernetes.io/component=audit"

        def finished() -> list[Any]:
            return [p for p in cluster.pods(selector) if p.status.phase == "Succeeded"]

        wait_for(lambda: bool(finished()), 60, "the audit's pod Succeeded")
        done, audits = finished(), cluster.pods(selector)
        failed = [p for p in audits if p.status.phase == "Failed"]
        assert not failed, cluster.explain(failed)
        for pod in done:
            _check_security(pod, kube_node.audit_image)  # the chart's audit image

        # Deleting the mirror: the garbage collector takes all it owned.
        kc("delete", f"kafkamirror/{MIRROR}", "--wait=true", timeout=120)
        wait_for(lambda: not cluster.left_of_the_mirror(), 120, "the mirror's objects gone")
        assert cluster.ready(OPERATOR)
    except BaseException:
        print(out.getvalue())
        print(cluster.diagnostics())
        raise
    operator_log = "\n".join(
        cluster.core.read_namespaced_pod_log(p.metadata.name, namespace)
        for p in cluster.pods(OPERATOR)
    )
    assert "Forbidden" not in operator_log and " 403" not in operator_log
