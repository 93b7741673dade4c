"""Nothing gained by writing a KafkaMirror: a user who may create KafkaMirror objects and nothing
else in the namespace (impersonated, with a Role of their own, on the real API server) tries
each way to make the operator hand a Secret it reads to a place of the user's choosing — their
own worker image, their own Spark master, Spark packages, a bootstrap host of theirs with SASL
PLAIN, client settings that swap the cluster or the group's identity. Each is refused at
admission or reported as `Ready=False`, reason `NotAllowed`, and no worker or CronJob carries
the hostile value; the operator does not even connect to a host off its list. A running mirror
whose spec turns disallowed is stopped, and resumes when the spec is fixed."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import apply
from kafka_mirror.render import DEFAULT_AUDIT_IMAGE, DEFAULT_IMAGE
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.kstatus import kstatus
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.objects import condition, exists, get_custom, mirror, secret, secret_names
from tests.helpers.stack import run_operator
from tests.helpers.tenant import LOGIN, PASSWORD, USER, Listener, create, team_login
from tests.helpers.worker import wait_for

pytestmark = pytest.mark.kube

CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
STATUS_TICKS = 6  # seconds: three of the test operator's status refreshes


def test_the_author_may_write_mirrors_and_nothing_else(
    kubectl: Path, kube_apiserver: KubeApiServer, namespace: str, author: client.ApiClient
) -> None:
    def can_i(*request: str) -> bool:
        result = run_kubectl(
            kubectl,
            kube_apiserver.kubeconfig,
            *("auth", "can-i", *request, "-n", namespace, f"--as={USER}"),
            check=False,
        )
        return result.stdout.strip() == "yes"

    assert can_i("create", "kafkamirrors.kafkamirror.io")
    for request in (
        ("get", "secrets"),
        ("get", f"secrets/{LOGIN}"),
        ("create", "pods"),
        ("create", "deployments.apps"),
        ("create", "cronjobs.batch"),
        ("create", "mirrortopicselections.kafkamirror.io"),
        ("patch", "kafkamirrors.kafkamirror.io", "--subresource=status"),
    ):
        assert not can_i(*request), request
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(author).read_namespaced_secret(LOGIN, namespace)
    assert refused.value.status == 403


def ready(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return condition(get_custom(api, namespace, "kafkamirrors", name), "Ready")


def not_allowed_message(api: client.ApiClient, namespace: str, name: str) -> str:
    """The message of the mirror's Ready condition once it says NotAllowed; GitOps tools then
    read the mirror as failed (kstatus), not as current."""
    wait_for(
        lambda: ready(api, namespace, name).get("reason") == "NotAllowed",
        60,
        f"{name} reported NotAllowed",
    )
    assert kstatus(get_custom(api, namespace, "kafkamirrors", name)) == "Failed"
    return str(ready(api, namespace, name)["message"])


def rendered_nothing(api: client.ApiClient, namespace: str, name: str) -> None:
    apps, batch, core = client.AppsV1Api(api), client.BatchV1Api(api), client.CoreV1Api(api)
    assert not exists(apps.read_namespaced_deployment, f"{name}-worker", namespace)
    assert not exists(batch.read_namespaced_cron_job, f"{name}-audit", namespace)
    assert not exists(core.read_namespaced_config_map, f"{name}-worker-config", namespace)


def warned(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    return [
        e.message
        for e in events
        if e.involved_object.name == name and e.reason == "NotAllowed" and e.type == "Warning"
    ]


@pytest.mark.parametrize(
    ("field", "spec", "value", "flag"),
    [
        (
            "spec.worker.image",
            {"worker": {"image": "evil.example/steal:1"}},
            "evil.example/steal:1",
            "--allowed-worker-image (chart value allowed.workerImages)",
        ),
        (
            "spec.audit.spark.master",
            {"audit": {"spark": {"master": "spark://attacker.example:7077"}}},
            "spark://attacker.example:7077",
            "--allowed-spark-master (chart value allowed.sparkMasters)",
        ),
        (
            "spec.worker.annotations",
            {"worker": {"annotations": {"sidecar.istio.io/inject": "false"}}},  # out of the mesh
            "sidecar.istio.io/inject",
            "--allowed-pod-annotation (chart value allowed.podAnnotations)",
        ),
        (
            "spec.worker.tolerations",
            {"worker": {"tolerations": [{"key": CONTROL_PLANE, "operator": "Exists"}]}},
            CONTROL_PLANE,
            "--allowed-toleration-key (chart value allowed.tolerationKeys)",
        ),
        (
            "spec.worker.nodeSelector",
            {"worker": {"nodeSelector": {CONTROL_PLANE: ""}}},
            f"{CONTROL_PLANE}=",
            "--allowed-node-selector (chart value allowed.nodeSelectors)",
        ),
    ],
    ids=["own-worker-image", "own-spark-master", "annotation", "toleration", "node-selector"],
)
@pytest.mark.usefixtures("guarded_operator")
def test_a_value_off_the_allow_lists_is_reported_and_nothing_is_rendered(
    kube_api: client.ApiClient,
    namespace: str,
    author: client.ApiClient,
    listener: Listener,
    field: str,
    spec: dict[str, Any],
    value: str,
    flag: str,
) -> None:
    allowed_host = team_login(f"localhost:{listener.port}")
    create(author, mirror("steal", namespace, allowed_host, allowed_host, **spec))
    message = not_allowed_message(author, namespace, "steal")
    assert f"{field} {value!r} is not allowed" in message and flag in message
    wait_for(lambda: bool(warned(kube_api, namespace, "steal")), 30, "a NotAllowed event")
    rendered_nothing(kube_api, namespace, "steal")
    # What the author can read holds no credential, and nothing reached out to a cluster.
    assert PASSWORD not in json.dumps(get_custom(author, namespace, "kafkamirrors", "steal"))
    assert listener.connections == 0


@pytest.mark.usefixtures("guarded_operator")
def test_plain_without_tls_is_refused_and_sends_nothing(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """SASL PLAIN sends the password as it is: without TLS, anyone on the path reads it."""
    plain = team_login(f"localhost:{listener.port}", mechanism="PLAIN")
    create(author, mirror("plain", namespace, plain, team_login(f"localhost:{listener.port}")))
    message = not_allowed_message(author, namespace, "plain")
    assert "spec.source.sasl.mechanism 'PLAIN' is not allowed" in message
    assert "--allow-plain-without-tls (chart value allowed.plainWithoutTls)" in message
    rendered_nothing(kube_api, namespace, "plain")
    assert listener.connections == 0


@pytest.mark.usefixtures("guarded_operator")
def test_a_secret_that_did_not_opt_in_is_refused_and_reaches_no_pod(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """The author may not read the other team's Secret, nor label it: a mirror naming it gets
    nothing rendered, so no pod is given it, and the operator does not log in with it."""
    apply(kube_api, secret("payments-login", namespace, opted_in=False, password="theirs-7f1"))
    cluster = team_login(f"localhost:{listener.port}")
    cluster["sasl"]["passwordSecret"] = {"name": "payments-login", "key": "password"}
    create(author, mirror("borrow", namespace, cluster, team_login(f"localhost:{listener.port}")))
    message = not_allowed_message(author, namespace, "borrow")
    assert "a Secret 'payments-login' is not allowed" in message
    assert "kafkamirror.io/credential=true" in message and "--allow-unlabelled-secrets" in message
    rendered_nothing(kube_api, namespace, "borrow")
    assert listener.connections == 0


def pod_secret_names(api: client.ApiClient, namespace: str, mirror_name: str) -> set[str]:
    """Every Secret the mirror's pod templates (workers and audit) reference."""
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    pods = [apps.read_namespaced_deployment(f"{mirror_name}-worker", namespace).spec.template]
    pods.append(batch.read_namespaced_cron_job(f"{mirror_name}-audit", namespace).spec.job_template)
    return secret_names(api.sanitize_for_serialization(pods))


@pytest.mark.usefixtures("guarded_operator")
def test_a_secret_that_appears_later_reaches_a_pod_only_once_it_opted_in(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """Issue 63: a mirror naming a Secret not created yet was rendered with a reference to it,
    and the kubelet injected whatever Secret of that name appeared later (a Helm release's, a
    rotation's). The pods reference only the operator's copy, made from a Secret that opted in;
    every refusal stops the workers and the audit, and deletes the copy."""
    apps, batch, core = (
        client.AppsV1Api(kube_api),
        client.BatchV1Api(kube_api),
        client.CoreV1Api(kube_api),
    )
    cluster = team_login(f"localhost:{listener.port}")
    cluster["sasl"]["passwordSecret"] = {"name": "orders-db", "key": "password"}
    create(author, mirror("later", namespace, cluster, team_login(f"localhost:{listener.port}")))

    def stopped() -> bool:
        # The audit CronJob is applied after the Deployment: both must be there.
        return (
            exists(batch.read_namespaced_cron_job, "later-audit", namespace)
            and apps.read_namespaced_deployment("later-worker", namespace).spec.replicas == 0
            and bool(batch.read_namespaced_cron_job("later-audit", namespace).spec.suspend)
            and not exists(core.read_namespaced_secret, "later-credentials", namespace)
        )

    wait_for(stopped, 60, "a mirror whose Secret is missing rendered with nothing running")
    wait_for(
        lambda: "orders-db" in ready(author, namespace, "later").get("message", ""),
        60,
        "the status to name the missing Secret",
    )
    assert pod_secret_names(kube_api, namespace, "later") == {"later-credentials"}

    # Someone else's Secret of that name appears, unlabelled: refused, nothing of it is copied.
    apply(kube_api, secret("orders-db", namespace, opted_in=False, password="orders-db-pw-91"))
    assert "a Secret 'orders-db' is not allowed" in not_allowed_message(author, namespace, "later")
    time.sleep(STATUS_TICKS)  # several status ticks go by
    assert stopped()
    assert pod_secret_names(kube_api, namespace, "later") == {"later-credentials"}

    # Its owner labels it: the copy is made and the workers run with it.
    apply(kube_api, secret("orders-db", namespace, password="orders-db-pw-91"))
    wait_for(
        lambda: (
            exists(core.read_namespaced_secret, "later-credentials", namespace)
            and apps.read_namespaced_deployment("later-worker", namespace).spec.replicas == 1
        ),
        60,
        "the copy made and the workers started",
    )
    copy = core.read_namespaced_secret("later-credentials", namespace)
    assert (
        copy.data["KAFKA_MIRROR_SOURCE_SASL_PASSWORD"]
        == secret("x", namespace, password="orders-db-pw-91")["data"]["password"]
    )

    # The label taken off again: stopped at once, and the copy deleted.
    apply(kube_api, secret("orders-db", namespace, opted_in=False, password="orders-db-pw-91"))
    wait_for(stopped, 60, "the mirror stopped and its copy deleted")


@pytest.mark.usefixtures("guarded_operator")
def test_a_binary_key_named_first_cannot_keep_a_refusal_from_stopping_the_mirror(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """The attack review's: a CA from a labelled Secret's binary key (a PKCS#12 store), read
    before the password's Secret, once crashed every converge ahead of that Secret's check."""
    store = secret("truststore", namespace)
    store["data"] = {"ca.p12": base64.b64encode(b"\x30\x82\xff\xfe").decode()}
    apply(kube_api, store)
    apply(kube_api, secret("payments-login", namespace, opted_in=False, password="theirs-7f1"))
    cluster = team_login(f"localhost:{listener.port}")
    cluster["tls"] = {"enabled": True, "caCertificate": {"name": "truststore", "key": "ca.p12"}}
    cluster["sasl"]["passwordSecret"] = {"name": "payments-login", "key": "password"}
    create(author, mirror("binary", namespace, cluster, team_login(f"localhost:{listener.port}")))
    assert "a Secret 'payments-login' is not allowed" in not_allowed_message(
        author, namespace, "binary"
    )
    rendered_nothing(kube_api, namespace, "binary")
    assert listener.connections == 0


@pytest.mark.usefixtures("guarded_operator")
def test_a_secret_bound_to_hosts_goes_to_no_other_host_the_list_allows(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """Issue 63: the label is per namespace and the host list global, so a labelled Secret
    could go to any allowed cluster, one the author administers too. Its manager binds it."""
    bound = secret("bound-login", namespace, username="team", password="bound-pw-3c")
    bound["metadata"]["annotations"] = {"kafkamirror.io/bootstrap-hosts": "kafka-a.example.com"}
    apply(kube_api, bound)
    cluster = team_login(f"localhost:{listener.port}")
    cluster["sasl"]["passwordSecret"] = {"name": "bound-login", "key": "password"}
    create(author, mirror("elsewhere", namespace, cluster, cluster))
    message = not_allowed_message(author, namespace, "elsewhere")
    assert f"Secret bound-login may not be sent to 'localhost:{listener.port}'" in message
    assert "kafka-a.example.com" in message
    time.sleep(STATUS_TICKS)  # several status ticks go by
    assert listener.connections == 0
    core = client.CoreV1Api(kube_api)
    assert not exists(core.read_namespaced_secret, "elsewhere-credentials", namespace)


@pytest.fixture
def unlabelled_operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path, listener: Listener
) -> Iterator[OperatorProcess]:
    """The guarded operator of an installer who allows Secrets without the opt-in label."""
    yield from run_operator(
        OperatorProcess(
            kube_apiserver.kubeconfig,
            namespace,
            tmp_path,
            extra_args=(
                *("--allowed-bootstrap-host", f"localhost:{listener.port}"),
                "--allow-unlabelled-secrets",
            ),
        )
    )


@pytest.mark.usefixtures("unlabelled_operator")
def test_a_mirrors_copy_of_its_credentials_is_no_other_mirrors_input(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, listener: Listener
) -> None:
    """The attack review's: even where any Secret may be named, the operator's copy of a
    host-bound Secret carries no binding, so naming it would send the password anywhere."""
    bound = secret("bound-login", namespace, username="team", password="bound-pw-9d")
    bound["metadata"]["annotations"] = {
        "kafkamirror.io/bootstrap-hosts": f"localhost:{listener.port}"
    }
    apply(kube_api, bound)
    cluster = team_login(f"localhost:{listener.port}")
    cluster["sasl"]["passwordSecret"] = {"name": "bound-login", "key": "password"}
    create(author, mirror("first", namespace, cluster, cluster))
    core = client.CoreV1Api(kube_api)
    wait_for(
        lambda: exists(core.read_namespaced_secret, "first-credentials", namespace),
        60,
        "the first mirror's copy of its credentials",
    )
    copied = core.read_namespaced_secret("first-credentials", namespace).data
    key = next(name for name in copied if name.endswith("PASSWORD"))
    theirs = team_login(f"localhost:{listener.port}")
    theirs["sasl"]["passwordSecret"] = {"name": "first-credentials", "key": key}
    create(author, mirror("second", namespace, theirs, theirs))
    message = not_allowed_message(author, namespace, "second")
    assert "Secret first-credentials is the copy the operator made of mirror first's" in message
    assert not exists(core.read_namespaced_secret, "second-credentials", namespace)


@pytest.mark.usefixtures("guarded_operator")
def test_a_bootstrap_host_off_the_list_is_refused_before_any_connection(
    kube_api: client.ApiClient,
    namespace: str,
    author: client.ApiClient,
    listener: Listener,
) -> None:
    # The same port under a name the list does not hold: the operator would reach it.
    theirs = team_login(f"127.0.0.1:{listener.port}")
    create(author, mirror("probe", namespace, theirs, team_login(f"localhost:{listener.port}")))
    message = not_allowed_message(author, namespace, "probe")
    assert f"spec.source.bootstrapServers '127.0.0.1:{listener.port}' is not allowed" in message
    assert "--allowed-bootstrap-host (chart value allowed.bootstrapHosts)" in message
    time.sleep(STATUS_TICKS)  # several status ticks go by
    assert listener.connections == 0, "the operator connected to a host off its list"
    rendered_nothing(kube_api, namespace, "probe")
    # The listener does see the operator when a mirror names the host the list allows.
    allowed = {"bootstrapServers": f"localhost:{listener.port}"}
    create(author, mirror("allowed", namespace, allowed, allowed))
    wait_for(lambda: listener.connections > 0, 60, "the operator to reach the allowed host")


@pytest.mark.parametrize(
    "entry",
    [
        "PLAINTEXT://127.0.0.5:19093/x.kafka.svc.cluster.local:9093",  # issue 63's
        "team@localhost:9092",
        "127.1:9092",
        "localhost:9092/",
    ],
)
def test_an_entry_the_clients_read_otherwise_is_refused_at_admission(
    namespace: str, author: client.ApiClient, entry: str
) -> None:
    cluster = {"bootstrapServers": entry}
    with pytest.raises(ApiException) as refused:
        create(author, mirror("reread", namespace, cluster, {"bootstrapServers": "kafka-b:9092"}))
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422, message
    assert "spec.source.bootstrapServers" in message


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("source.config", "test.mock.num.brokers"),
        ("source.config", "isolation.level"),
        ("target.config", "group.instance.id"),
        ("source.config", "plugin.library.paths"),
        ("target.config", "interceptor.test.config1"),
        ("audit.spark.conf", "spark.jars.packages"),
        ("audit.spark.conf", "spark.driver.extraJavaOptions"),
        ("audit.spark.conf", "spark.kubernetes.container.image"),
    ],
)
def test_settings_off_the_closed_lists_are_refused_at_admission(
    kube_api: client.ApiClient, namespace: str, author: client.ApiClient, path: str, key: str
) -> None:
    cluster = {"bootstrapServers": "kafka-a:9092"}
    body = mirror("settings", namespace, cluster, cluster)
    node = body["spec"]
    *parents, last = path.split(".")
    for step in parents:
        node = node.setdefault(step, {})
    node.setdefault(last, {})[key] = "org.example:payload:1.0"
    with pytest.raises(ApiException) as refused:
        create(author, body)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 422, message
    assert f"spec.{path}: Invalid value" in message and f"refused: {key}" in message
    assert "may set only these" in message


def audit_run_under_way(batch: client.BatchV1Api, namespace: str, cronjob: str) -> str:
    """A Job of the CronJob's as its controller starts one (this API server runs no
    controllers): owned by the CronJob and listed in its `status.active`; its name."""
    owner = batch.read_namespaced_cron_job(cronjob, namespace)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(
            name=f"{cronjob}-29000000",
            owner_references=[
                client.V1OwnerReference(
                    api_version="batch/v1",
                    kind="CronJob",
                    name=cronjob,
                    uid=owner.metadata.uid,
                    controller=True,
                )
            ],
        ),
        spec=client.V1JobSpec(template=owner.spec.job_template.spec.template),
    )
    made = batch.create_namespaced_job(namespace, job)
    active = [{"kind": "Job", "name": made.metadata.name, "uid": made.metadata.uid}]
    batch.patch_namespaced_cron_job_status(cronjob, namespace, {"status": {"active": active}})
    return str(made.metadata.name)


@pytest.mark.usefixtures("guarded_operator")
def test_a_running_mirror_turned_disallowed_is_stopped_and_resumes_when_fixed(
    kube_api: client.ApiClient,
    namespace: str,
    author: client.ApiClient,
    listener: Listener,
) -> None:
    cluster = team_login(f"localhost:{listener.port}")
    create(author, mirror("m", namespace, cluster, cluster))
    apps, batch = client.AppsV1Api(kube_api), client.BatchV1Api(kube_api)
    wait_for(
        lambda: exists(batch.read_namespaced_cron_job, "m-audit", namespace),
        60,
        "the mirror's children",
    )
    assert apps.read_namespaced_deployment("m-worker", namespace).spec.replicas == 1
    run = audit_run_under_way(batch, namespace, "m-audit")

    patch = {"spec": {"worker": {"image": "evil.example/steal:1"}}}
    client.CustomObjectsApi(author).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", "m", patch
    )
    wait_for(
        lambda: (
            apps.read_namespaced_deployment("m-worker", namespace).spec.replicas == 0
            and batch.read_namespaced_cron_job("m-audit", namespace).spec.suspend
        ),
        60,
        "the workers scaled to zero and the audit suspended",
    )
    wait_for(
        lambda: not exists(batch.read_namespaced_job, run, namespace),
        60,
        "the audit run under way deleted",
    )
    assert "spec.worker.image 'evil.example/steal:1'" in not_allowed_message(author, namespace, "m")
    # Stopped, not rendered again: the hostile image is in no pod template.
    workers = apps.read_namespaced_deployment("m-worker", namespace).spec.template.spec
    audits = batch.read_namespaced_cron_job("m-audit", namespace).spec.job_template.spec
    assert workers.containers[0].image == DEFAULT_IMAGE
    assert audits.template.spec.containers[0].image == DEFAULT_AUDIT_IMAGE

    fixed = {"spec": {"worker": {"image": None}}}
    client.CustomObjectsApi(author).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", "m", fixed
    )
    wait_for(
        lambda: (
            apps.read_namespaced_deployment("m-worker", namespace).spec.replicas == 1
            and not batch.read_namespaced_cron_job("m-audit", namespace).spec.suspend
            and ready(author, namespace, "m").get("reason") != "NotAllowed"
        ),
        60,
        "the mirror to run again",
    )
