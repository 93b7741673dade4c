"""Helm, built from its Go module, lints the chart and installs it into a real API server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kafka_mirror.kube import api_client
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import prometheus_operator_crds
from tests.helpers.helm import CHART, run_helm
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.kubectl import wait_established
from tests.helpers.metrics import exported_metric_names, metric_names_in

pytestmark = pytest.mark.helm


def test_chart_lints_clean(helm: Path, tmp_path: Path) -> None:
    output = run_helm(helm, tmp_path, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in output


def test_chart_installs_the_crds(helm: Path, bare_apiserver: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = bare_apiserver.kubeconfig
    run_helm(
        helm,
        tmp_path,
        "install",
        "kafka-mirror",
        str(CHART),
        "--namespace",
        "default",
        kubeconfig=kubeconfig,
    )
    status = run_helm(
        helm, tmp_path, "status", "kafka-mirror", "--namespace", "default", kubeconfig=kubeconfig
    )
    assert "STATUS: deployed" in status
    with api_client(kubeconfig) as api:
        crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    names = {crd.metadata.name for crd in crds}
    assert {"kafkamirrors.kafkamirror.io", "mirrortopicselections.kafkamirror.io"} <= names


def test_the_monitoring_objects_pass_the_prometheus_operators_schemas(
    helm: Path, kubectl: Path, bare_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = bare_apiserver.kubeconfig
    crds = prometheus_operator_crds()
    for kind in ("servicemonitors", "prometheusrules"):
        path = crds / f"monitoring.coreos.com_{kind}.yaml"
        run_kubectl(kubectl, kubeconfig, "apply", "--server-side", "-f", str(path))
    wait_established(kubectl, kubeconfig)
    run_helm(
        helm,
        tmp_path,
        *("install", "monitored", str(CHART), "--namespace", "monitoring", "--create-namespace"),
        *("--set", "metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true"),
        *("--set", "grafanaDashboard.enabled=true"),
        kubeconfig=kubeconfig,
    )
    listed = run_kubectl(
        kubectl,
        kubeconfig,
        "get",
        "servicemonitors,prometheusrules,configmaps",
        "-n",
        "monitoring",
        "-o",
        "name",
    ).stdout.split()
    assert "servicemonitor.monitoring.coreos.com/monitored-kafka-mirror-operator-workers" in listed
    assert "prometheusrule.monitoring.coreos.com/monitored-kafka-mirror-operator" in listed
    assert "configmap/monitored-kafka-mirror-operator-dashboard" in listed


# --- the chart's RBAC (its operator end to end: test_node_e2e.py, on the real node) ---

RELEASE = "kafka-mirror-operator"  # the chart's full name is then the release name
RELEASE_NAMESPACE = "default"  # `helm template` without --namespace


def can_i(kubectl: Path, kubeconfig: Path, account: str, *request: str) -> bool:
    result = run_kubectl(
        kubectl, kubeconfig, "auth", "can-i", *request, f"--as={account}", check=False
    )
    assert result.stdout.strip() in ("yes", "no"), result.stderr
    return result.stdout.strip() == "yes"


@pytest.mark.kube
def test_the_charts_rbac_is_no_broader_than_the_operator_needs(
    helm: Path, kubectl: Path, kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = kube_apiserver.kubeconfig
    run_helm(
        helm,
        tmp_path,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        kubeconfig=kubeconfig,
    )
    account = f"system:serviceaccount:{namespace}:{RELEASE}"

    def allowed(*request: str) -> bool:
        return can_i(kubectl, kubeconfig, account, *request)

    # What reconciling needs, in the watched namespace (blockOwnerDeletion on the children
    # needs update on the mirrors' finalizers under OwnerReferencesPermissionEnforcement).
    for request in (
        ("watch", "kafkamirrors.kafkamirror.io"),
        ("patch", "kafkamirrors.kafkamirror.io", "--subresource=status"),
        ("patch", "mirrortopicselections.kafkamirror.io", "--subresource=status"),
        ("update", "kafkamirrors.kafkamirror.io", "--subresource=finalizers"),
        ("get", "secrets"),
        ("get", "services"),  # a child's name: free, or the mirror's own?
        ("create", "deployments.apps"),
        ("patch", "deployments.apps"),
        ("delete", "cronjobs.batch"),
        ("delete", "jobs.batch"),  # an audit run under way when its mirror is refused
        ("patch", "poddisruptionbudgets.policy"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("patch", "networkpolicies.networking.k8s.io"),
        ("create", "events"),
    ):
        assert allowed(*request, "-n", namespace), request
    # And no more: Secrets by name only, nothing outside the namespace, no pods, no cluster
    # objects, no way to grant itself more, no verb it never uses.
    for request in (
        ("update", "kafkamirrors.kafkamirror.io", "-n", namespace),
        ("update", "kafkamirrors.kafkamirror.io", "--subresource=status", "-n", namespace),
        ("list", "deployments.apps", "-n", namespace),
        ("update", "deployments.apps", "-n", namespace),
        ("watch", "configmaps", "-n", namespace),
        ("list", "cronjobs.batch", "-n", namespace),
        ("create", "jobs.batch", "-n", namespace),
        ("list", "networkpolicies.networking.k8s.io", "-n", namespace),
        ("patch", "events", "-n", namespace),
        ("create", "events.events.k8s.io", "-n", namespace),
        ("list", "secrets", "-n", namespace),
        ("watch", "secrets", "-n", namespace),
        ("update", "secrets", "-n", namespace),
        ("create", "pods", "-n", namespace),
        ("create", "pods", "--subresource=exec", "-n", namespace),
        ("get", "secrets", "-n", "kube-system"),
        ("create", "deployments.apps", "-n", "default"),
        ("get", "kafkamirrors.kafkamirror.io", "-n", "default"),
        ("delete", "kafkamirrors.kafkamirror.io", "-n", namespace),
        ("delete", "nodes"),
        ("list", "namespaces"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ("escalate", "roles.rbac.authorization.k8s.io", "-n", namespace),
        ("bind", "roles.rbac.authorization.k8s.io", "-n", namespace),
        ("create", "customresourcedefinitions.apiextensions.k8s.io"),
        ("*", "*", "-n", namespace),
    ):
        assert not allowed(*request), request


def test_the_alert_rules_cover_the_issues_and_use_only_exported_metrics(
    helm: Path, tmp_path: Path
) -> None:
    rendered = run_helm(
        helm,
        tmp_path,
        *("template", RELEASE, str(CHART), "--set", "prometheusRule.enabled=true"),
        *("--show-only", "templates/prometheusrule.yaml"),
    )
    rules = yaml.safe_load(rendered)["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"]: rule for rule in rules}
    assert {
        "KafkaMirrorLagGrowing",
        "KafkaMirrorLatencyOverRPO",
        "KafkaMirrorAuditFailed",
        "KafkaMirrorWorkersNotReady",
        "KafkaMirrorRecordsLostToRetention",
        "KafkaMirrorAuditStale",
        "KafkaMirrorOperatorAbsent",
        "KafkaMirrorOperatorStatusStale",
    } <= alerts.keys()
    exported = exported_metric_names()
    for name, rule in alerts.items():
        used = metric_names_in(rule["expr"])
        assert used, f"{name} uses none of our metrics"
        assert used <= exported, f"{name} uses metrics nobody exports: {used - exported}"
        # Prometheus, not Helm, fills in $labels: the template must leave them intact.
        per_mirror = not name.startswith("KafkaMirrorOperator")
        assert ("{{ $labels.mirror }}" in rule["annotations"]["summary"]) == per_mirror, name
    assert "kafka_mirror_max_latency_seconds > 300" in alerts["KafkaMirrorLatencyOverRPO"]["expr"]
    assert alerts["KafkaMirrorOperatorAbsent"]["for"] == "5m"


@pytest.mark.parametrize(
    "values",
    [
        "watch.allNamespaces=true,allowed.anyBootstrapHost=true",
        "watch.namespaces={team-a,team-b},allowed.bootstrapHosts={kafka-*.kafka.svc}",
        "metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true,grafanaDashboard.enabled=true",
        "allowed.workerImages={registry.example.com/platform/*},"
        "allowed.sparkMasters={spark://spark-master.spark.svc:7077},"
        "allowed.bootstrapHosts={kafka-*.kafka.svc.cluster.local,broker.example.com:9093},"
        "allowed.podAnnotations={prometheus.io/*},allowed.tolerationKeys={dedicated},"
        "allowed.nodeSelectors={pool=kafka},allowed.plainWithoutTls=true,"
        "allowed.unlabelledSecrets=true",
    ],
)
def test_the_chart_lints_and_renders_with_its_options(
    helm: Path, tmp_path: Path, values: str
) -> None:
    run_helm(helm, tmp_path, "lint", "--strict", str(CHART), "--set", values)
    docs = [
        d
        for d in yaml.safe_load_all(
            run_helm(helm, tmp_path, "template", RELEASE, str(CHART), "--set", values)
        )
        if d
    ]
    kinds = [d["kind"] for d in docs]
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    # Besides the Role of the leader's Lease, in the release's namespace:
    roles = [
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-leader")
    ]
    assert f"--leader-election-namespace={RELEASE_NAMESPACE}" in args
    if "allNamespaces" in values:
        assert "ClusterRole" in kinds and not roles and "--all-namespaces" in args
    elif "team-a" in values:
        assert roles == ["team-a", "team-b"]
        assert "--namespace=team-a" in args and "--namespace=team-b" in args
    elif "allowed" in values:
        assert args[4:] == [
            "--audit-image=ghcr.io/kafka-mirror/kafka-mirror-operator-audit:0.1.0",
            "--allowed-worker-image=registry.example.com/platform/*",
            "--allowed-spark-master=spark://spark-master.spark.svc:7077",
            "--allowed-bootstrap-host=kafka-*.kafka.svc.cluster.local",
            "--allowed-bootstrap-host=broker.example.com:9093",
            "--allowed-pod-annotation=prometheus.io/*",
            "--allowed-toleration-key=dedicated",
            "--allowed-node-selector=pool=kafka",
            "--allow-plain-without-tls",
            "--allow-unlabelled-secrets",
            f"--leader-election-namespace={RELEASE_NAMESPACE}",
        ]
    else:
        assert kinds.count("ServiceMonitor") == 2 and "PrometheusRule" in kinds
        dashboard = next(d for d in docs if d["kind"] == "ConfigMap")
        assert json.loads(dashboard["data"]["kafka-mirror.json"])["uid"] == "kafka-mirror"


def test_only_a_kubernetes_spark_master_gives_the_operator_pods_and_polices_them(
    helm: Path, tmp_path: Path
) -> None:
    """The audit's Role on Spark on Kubernetes grants its driver pods, which the operator must
    hold to grant; without such a master it holds none, and no admission policy is installed
    (test_audit_on_kubernetes.py tries the policy on the API server)."""

    def rendered(*values: str) -> list[dict[str, Any]]:
        text = run_helm(helm, tmp_path, "template", RELEASE, str(CHART), *values)
        return [d for d in yaml.safe_load_all(text) if d]

    def pod_rules(docs: list[dict[str, Any]]) -> list[Any]:
        return [
            rule
            for d in docs
            if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-leader")
            for rule in d["rules"]
            if "pods" in rule["resources"]
        ]

    def policies(docs: list[dict[str, Any]]) -> list[str]:
        return sorted(d["kind"] for d in docs if d["apiVersion"].startswith("admission"))

    for docs in (rendered(), rendered("--set", "allowed.sparkMasters={spark://master:7077}")):
        assert pod_rules(docs) == [] and policies(docs) == []
    docs = rendered("--set", "allowed.sparkMasters={k8s://https://kubernetes.default.svc}")
    assert pod_rules(docs) == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
        }
    ]
    assert policies(docs) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def test_the_values_schema_refuses_a_misspelt_value(helm: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(helm), "lint", str(CHART), "--set", "watch.allNamespace=true"],
        capture_output=True,
        text=True,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert result.returncode != 0
    assert "allNamespace" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("values", "workers_in"),
    [
        ("", ["kafka-mirror"]),
        ("watch.namespaces={team-a,team-b},allowed.anyBootstrapHost=true", ["team-a", "team-b"]),
        (
            "watch.allNamespaces=true,allowed.anyBootstrapHost=true",
            [],
        ),  # examples/networkpolicy-workers.yaml per namespace
        ("networkPolicy.enabled=false", None),
    ],
)
def test_network_policies_let_only_the_named_pods_reach_the_metrics_ports(
    helm: Path, tmp_path: Path, values: str, workers_in: list[str] | None
) -> None:
    """The node's network (a plain bridge) enforces no NetworkPolicy, so what is checked here
    is what the chart asks of a network that does: only `metricsFrom` may reach the port named
    `metrics` of the operator's pod and of the workers in each watched namespace."""
    options = ["--namespace", "kafka-mirror", *(("--set", values) if values else ())]
    docs = yaml.safe_load_all(run_helm(helm, tmp_path, "template", RELEASE, str(CHART), *options))
    policies = [d for d in docs if d and d["kind"] == "NetworkPolicy"]
    if workers_in is None:
        assert policies == []
        return
    own_namespace = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka-mirror"}}}
    ]
    operator, *workers = policies
    assert operator["metadata"]["namespace"] == "kafka-mirror"
    assert operator["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": RELEASE,
        "app.kubernetes.io/instance": RELEASE,
    }
    assert [w["metadata"]["namespace"] for w in workers] == workers_in
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress: the clusters, anywhere
        assert policy["spec"]["ingress"] == [
            {"from": own_namespace, "ports": [{"port": "metrics", "protocol": "TCP"}]}
        ]
    for worker in workers:
        assert worker["spec"]["podSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": "kafka-mirror",
            "app.kubernetes.io/component": "worker",
        }


def test_network_policies_take_the_installers_peers(helm: Path, tmp_path: Path) -> None:
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {"metricsFrom": [peer]}}))
    rendered = run_helm(helm, tmp_path, "template", RELEASE, str(CHART), "-f", str(values))
    policies = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "NetworkPolicy"]
    assert len(policies) == 2
    assert all(p["spec"]["ingress"][0]["from"] == [peer] for p in policies)


@pytest.mark.parametrize("watch", ["watch.allNamespaces=true", "watch.namespaces={team-a}"])
def test_the_chart_refuses_other_namespaces_without_a_bootstrap_host_allow_list(
    helm: Path, tmp_path: Path, watch: str
) -> None:
    """Mirrors in team namespaces could send the Secrets they use to any host: the installer
    bounds the hosts, or says in a value that any host is meant."""
    result = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "--set", watch],
        capture_output=True,
        text=True,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert result.returncode != 0
    assert "needs allowed.bootstrapHosts" in result.stderr, result.stderr
    own = run_helm(
        helm,
        tmp_path,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        "team-a",
        "--set",
        "watch.namespaces={team-a}",
    )
    assert "kind: Deployment" in own  # the release's own namespace alone needs no list
