"""`kafka-mirror promote|failover|return`: set a mirror's spec.operation, as `kubectl patch`
or a GitOps commit would, then follow its status until it completes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_operation_commands(commands: Any) -> None:
    """`promote`, `failover` and `return`, each a subcommand of `commands`."""
    for verb, summary in (
        ("promote", "planned: mirror to lag 0, final checkpoints, commit offsets on the target"),
        ("failover", "unplanned: stop, commit offsets from the checkpoints on the target, RPO"),
        ("return", "end a fail back: promote this reverse mirror, then start --resume again"),
    ):
        operation = commands.add_parser(verb, help=f"{summary} (sets spec.operation)")
        operation.add_argument("mirror", help="the KafkaMirror")
        operation.add_argument("--namespace", required=True, help="namespace of the mirror")
        operation.add_argument("--id", help="the operation's id (default: the verb and the time)")
        if verb == "return":
            operation.add_argument(
                "--resume",
                required=True,
                help="the mirror to start again, which mirrors the opposite way (say a-to-b)",
            )
        if verb == "promote":
            operation.add_argument(
                "--fence",
                action=argparse.BooleanOptionalAction,
                default=None,
                help="deny writes on the source before the drain (default: in a switchover, "
                "a mirror naming its reverse; docs/runbook-dr.md)",
            )
        operation.add_argument(
            "--timeout",
            type=float,
            default=600,
            help="seconds to follow the status until completed (0: do not wait; default 600)",
        )
        operation.add_argument(
            "--kubeconfig", help="kubeconfig (default: in-cluster, then $KUBECONFIG)"
        )
        operation.set_defaults(handler=run_operation)


def run_operation(args: argparse.Namespace) -> None:
    """Set spec.operation, as `kubectl patch` or a GitOps commit would, then follow its status."""
    # Imported here, as the command line's other parts do: a worker starts without them.
    import json
    import time
    from datetime import UTC, datetime

    from kubernetes import client

    from kafka_mirror.api.models import GROUP, VERSION
    from kafka_mirror.kube import api_client

    kind = {"promote": "Promote", "failover": "Failover", "return": "Return"}[args.command]
    operation_id = args.id or f"{args.command}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    # A merge patch keeps what it does not name: the other fields of an earlier operation
    # are cleared, so that an old `fence` neither carries over nor refuses this one.
    requested: dict[str, Any] = {"type": kind, "id": operation_id, "resume": None, "fence": None}
    if kind == "Return":
        requested["resume"] = args.resume
    if kind == "Promote":
        requested["fence"] = args.fence
    with api_client(Path(args.kubeconfig) if args.kubeconfig else None) as api:
        objects = client.CustomObjectsApi(api)
        patch = {"spec": {"operation": requested}}
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, args.namespace, "kafkamirrors", args.mirror, patch
        )
        print(f"kafkamirror/{args.mirror}: {kind} {operation_id} requested")
        deadline, shown = time.monotonic() + args.timeout, ""
        while args.timeout > 0:
            mirror: Any = objects.get_namespaced_custom_object(
                GROUP, VERSION, args.namespace, "kafkamirrors", args.mirror
            )
            status = (mirror.get("status") or {}).get("operation") or {}
            if status.get("id") == operation_id:
                line = f"{status.get('phase')}: {status.get('message', '')}"
                if line != shown:
                    print(line, flush=True)
                    shown = line
                if status.get("phase") == "Failed":
                    sys.exit(f"{kind} {operation_id} failed: {status.get('message', '')}")
                if status.get("phase") == "Completed":
                    print(json.dumps({k: status.get(k) for k in ("rpo", "committed")}, indent=2))
                    if skipped := status.get("skippedGroups"):
                        # They read on from `auto.offset.reset` or their old offsets.
                        why = status.get("skippedReasons") or {}
                        named = "; ".join(f"{g} ({why.get(g, 'see the log')})" for g in skipped)
                        sys.exit(
                            f"{kind} completed, but these groups got none or not all of their "
                            f"offsets: {named}; stop their members or grant the right, then "
                            "commit by hand from the checkpoints"
                        )
                    return
            if time.monotonic() > deadline:
                sys.exit(f"not completed within {args.timeout:.0f} s; it goes on: see the status")
            time.sleep(1)
