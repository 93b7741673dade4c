"""A tenant of the operator: a user who may write KafkaMirror objects in one namespace and
nothing else (impersonated, with a Role of their own), the team's Secret they may not read, a
port that counts the connections it gets (a host of theirs), and the operator guarding the
namespace with a bootstrap-host allow-list of that port only. A pytest plugin (the root
conftest loads it), for the tests that try what such a user can make the operator do."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.kube import api_client, apply
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.objects import secret
from tests.helpers.stack import run_operator
from tests.helpers.worker import wait_for

USER = "mirror-author"
PASSWORD = "plain-password-of-the-team"  # what every route is after
LOGIN = "kafka-login"


class Listener:
    """A TCP port that counts the connections it gets: a host of the user's, or the network
    the operator could probe."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.socket = socket.create_server((host, 0))
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            self.connections += 1  # before the close: a client sees the reset after this
            connection.close()

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    port = Listener()
    yield port
    port.close()


@pytest.fixture
def guarded_operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path, listener: Listener
) -> Iterator[OperatorProcess]:
    """The operator with a bootstrap-host allow-list: only `localhost:<listener>`. Its images
    and Spark masters are the defaults (its own image, local mode)."""
    yield from run_operator(
        OperatorProcess(
            kube_apiserver.kubeconfig,
            namespace,
            tmp_path,
            extra_args=("--allowed-bootstrap-host", f"localhost:{listener.port}"),
        )
    )


def impersonating(
    kube_api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    user: str,
    resource: str,
) -> client.ApiClient:
    """An API client of `user`, who may write `resource` (of ours) in the namespace and nothing
    else (a Role and RoleBinding of their own)."""
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [{"apiGroups": [GROUP], "resources": [resource], "verbs": verbs}]
    rbac = "rbac.authorization.k8s.io"
    metadata = {"name": user, "namespace": namespace}
    apply(
        kube_api, {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": metadata, "rules": rules}
    )
    apply(
        kube_api,
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": user},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}],
        },
    )
    # The API server's authorizer learns the binding from a watch, a moment later: a request
    # before that is refused (seen once in CI, 403 where the test expected 422).
    review = {
        "spec": {
            "user": user,
            "resourceAttributes": {
                "group": GROUP,
                "resource": resource,
                "verb": "create",
                "namespace": namespace,
            },
        }
    }
    authorization = client.AuthorizationV1Api(kube_api)
    wait_for(
        lambda: bool(authorization.create_subject_access_review(review).status.allowed),
        30,
        f"the API server to authorize {user} by the new RoleBinding",
    )
    api = api_client(kubeconfig)
    api.set_default_header("Impersonate-User", user)
    return api


@pytest.fixture
def author(
    kube_api: client.ApiClient, kube_apiserver: KubeApiServer, namespace: str
) -> Iterator[client.ApiClient]:
    """An API client impersonating a user who may write KafkaMirror objects in the namespace,
    and nothing else; the team's Secret is there, which the user may not read."""
    apply(kube_api, secret(LOGIN, namespace, username="team", password=PASSWORD))
    api = impersonating(kube_api, kube_apiserver.kubeconfig, namespace, USER, "kafkamirrors")
    yield api
    api.close()


def team_login(bootstrap: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    """A cluster the mirror logs in to with the team's Secret (`mechanism` PLAIN: the password
    as it is on the wire, without TLS)."""
    return {
        "bootstrapServers": bootstrap,
        "sasl": {
            "mechanism": mechanism,
            "usernameSecret": {"name": LOGIN, "key": "username"},
            "passwordSecret": {"name": LOGIN, "key": "password"},
        },
    }


def create(api: client.ApiClient, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, body["metadata"]["namespace"], "kafkamirrors", body
    )
