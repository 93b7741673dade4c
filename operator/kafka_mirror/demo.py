"""The main job on the embedded default stack: what a newcomer runs first.

Brings up Kafka A and B and the API server, installs the CRDs, applies the example mirror and
selection (pointed at the local clusters), and shows them as the API server stored them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from kafka_mirror.api.models import API_VERSION, GROUP, VERSION, KafkaMirror, MirrorTopicSelection
from kafka_mirror.devstack import stack
from kafka_mirror.devstack.builds import REPO_ROOT
from kafka_mirror.kube import api_client, apply, install_crds, table

NAMESPACE = "kafka-mirror-demo"
EXAMPLES = REPO_ROOT / "examples"


def example_objects(kafka_a: str, kafka_b: str, namespace: str) -> list[dict[str, Any]]:
    """The example mirror and selection, in `namespace`, pointed at the given clusters."""
    mirror = yaml.safe_load((EXAMPLES / "kafkamirror-a-to-b.yaml").read_text())
    mirror["spec"]["source"]["bootstrapServers"] = kafka_a
    mirror["spec"]["target"]["bootstrapServers"] = kafka_b
    selection = yaml.safe_load((EXAMPLES / "selection-accounting.yaml").read_text())
    for body in (mirror, selection):
        body["metadata"]["namespace"] = namespace
    return [mirror, selection]


def apply_examples(api: ApiClient, kafka_a: str, kafka_b: str, namespace: str, out: TextIO) -> None:
    """Install the CRDs, apply the examples into `namespace`, and show them as stored."""
    install_crds(api)
    print("CRDs installed: kafkamirrors, mirrortopicselections", file=out)
    apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for body in example_objects(kafka_a, kafka_b, namespace):
        apply(api, body)
        print(f"applied {body['kind']} {namespace}/{body['metadata']['name']}", file=out)

    custom = client.CustomObjectsApi(api)
    mirror = KafkaMirror.model_validate(
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "kafkamirrors", "a-to-b")
    )
    selection = MirrorTopicSelection.model_validate(
        custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "mirrortopicselections", "accounting"
        )
    )
    print("\nKafkaMirror a-to-b as stored, with the server's defaults:", file=out)
    spec = mirror.spec.model_dump(by_alias=True, exclude_none=True)
    print(yaml.safe_dump({"spec": spec}, sort_keys=False), file=out)
    print("MirrorTopicSelection accounting:", file=out)
    print(
        yaml.safe_dump({"spec": selection.spec.model_dump(by_alias=True)}, sort_keys=False),
        file=out,
    )
    for kind, plural in (
        ("KafkaMirror", "kafkamirrors"),
        ("MirrorTopicSelection", "mirrortopicselections"),
    ):
        print(f"$ kubectl get {plural} -n {namespace}", file=out)
        print(table(api, API_VERSION, kind, namespace) + "\n", file=out)


def run(out: TextIO) -> None:
    info = stack.up()
    print("Dev stack is up:", file=out)
    for key, value in info.env().items():
        print(f"  {key}={value}", file=out)
    with api_client(Path(info.kubeconfig)) as api:
        apply_examples(api, info.kafka_a, info.kafka_b, NAMESPACE, out)
    print("Stop the stack with: .venv/bin/kafka-mirror dev down", file=out)
