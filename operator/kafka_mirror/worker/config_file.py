"""The worker's configuration file, which the operator rewrites when the mirror changes: new
selections apply live; a change that needs new clients makes the worker exit, and its pod's
restart applies it."""

from __future__ import annotations

import logging
from pathlib import Path

from kafka_mirror.api.worker_config import WorkerConfig, load

log = logging.getLogger(__name__)

# Changing these needs new clients, so the worker restarts to apply them.
RESTART_FIELDS = (
    "source",
    "target",
    "topic_naming",
    "offset_syncs",
    "metrics_port",
    "processes",
    "delivery",
    "commit_interval_seconds",
)


class ConfigFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = path.read_text()
        self.config: WorkerConfig = load(path)

    def reread(self) -> bool:
        """Take the file's changes if they apply live (`config` is then the new one); True:
        they need a restart."""
        text = self.path.read_text()
        if text == self.text:
            return False
        new = load(self.path)
        self.text = text
        changed = [f for f in RESTART_FIELDS if getattr(new, f) != getattr(self.config, f)]
        if changed:
            log.info("configuration of %s changed: exiting to restart with it", ", ".join(changed))
            return True
        log.info("configuration changed: applying the new selections live")
        self.config = new
        return False
