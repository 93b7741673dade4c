"""The development tooling (distribution `kafka-mirror-dev`, installed from a checkout): the dev
stack's real parts and the demo. The product package `kafka_mirror` never imports it at module
level; its `dev` and `demo` commands import `kafka_mirror_dev.commands` when run."""
