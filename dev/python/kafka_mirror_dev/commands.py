"""`kafka-mirror dev …` and `kafka-mirror demo`: the product's command line parses them and
hands them here (kafka_mirror.cli), so they run only where this package is installed."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from kafka_mirror_dev.builds import MissingPrerequisite


def run(args: argparse.Namespace) -> None:
    try:
        if args.command == "demo":
            _demo()
        else:
            _dev(args.action)
    except MissingPrerequisite as missing:
        sys.exit(f"kafka-mirror: missing prerequisite: {missing}")


def _demo() -> None:
    from kafka_mirror_dev import demo

    if not demo.run(sys.stdout):
        sys.exit(1)


def _dev(action: str) -> None:
    from kafka_mirror_dev import builds, stack

    if action == "build":
        builds.ensure_all()
        from kafka_mirror_dev import node, prerequisites

        if reason := prerequisites.unavailable_reason():
            print(f"the real node's images are not made here: {reason}", file=sys.stderr)
        else:
            node.prepare()
        return
    if action == "node":
        from kafka_mirror_dev import node

        node.run_until_stopped(sys.stdout)
        return
    if action == "manifests":
        from kafka_mirror_dev import manifests

        with tempfile.TemporaryDirectory() as home:
            text = manifests.render_install_manifest(builds.HELM.ensure(), Path(home))
        manifests.INSTALL_MANIFEST.write_text(text)
        print(f"wrote {manifests.INSTALL_MANIFEST}")
        return
    if action == "down":
        stack.down()
        print("dev stack stopped")
        return
    info = stack.up() if action == "up" else stack.running()
    if info is None:
        sys.exit("the dev stack is not running: start it with `kafka-mirror dev up`")
    for key, value in info.env().items():
        print(f"export {key}={shlex.quote(value)}")
