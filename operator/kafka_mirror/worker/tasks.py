"""The worker's tasks beside the record loop, as MirrorMaker 2 runs them beside its source task:
checkpoints (its MirrorCheckpointTask) and heartbeats (its MirrorHeartbeatTask)."""

from __future__ import annotations

import logging
import time

from confluent_kafka import TopicPartition

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.formats import HEARTBEATS_TOPIC, Heartbeat, checkpoints_topic
from kafka_mirror.kafka.tail import TopicTail
from kafka_mirror.worker.checkpoints import Checkpointer
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.translation import ProvenanceReader

log = logging.getLogger(__name__)


class CheckpointTask:
    """Checkpoints of the source groups on the partitions this worker owns, through whichever
    admin clients are current (they are renewed after timeouts). It runs off the mirroring loop
    (`periodic.OffLoop`), with a producer of its own."""

    def __init__(
        self, config: WorkerConfig, clients: Clients, syncs_topic: str, metrics: WorkerMetrics
    ) -> None:
        self.clients = clients
        self.topic = checkpoints_topic(config.source.alias)
        self.checkpointer = Checkpointer(
            clients.source_admin,
            clients.target_admin,
            clients.source_groups,
            clients.target_groups,
            clients.checkpoints_producer,
            TopicTail(clients.syncs_reader, syncs_topic),
            self.topic,
            config.groups_checkpointed(),
            config.checkpoints.sync_group_offsets,
            metrics,
            target_reader=ProvenanceReader(
                clients.admin_settings["target"],
                config.source.alias,
                config.offset_syncs.max_lag,
            ),
            writer=config.mirror,
        )

    def load_emitted(self) -> None:
        """Once the checkpoints topic exists: what earlier workers wrote there."""
        self.checkpointer.load_emitted(TopicTail(self.clients.checkpoints_reader, self.topic))

    def run(self, assigned: list[TopicPartition], mirrored: dict[str, str]) -> None:
        """One pass over the `assigned` source partitions of the `mirrored` topics (source
        topic → remote topic)."""
        owned = {
            (tp.topic, tp.partition): mirrored[tp.topic] for tp in assigned if tp.topic in mirrored
        }
        checkpointer, clients = self.checkpointer, self.clients
        checkpointer.source_admin, checkpointer.target_admin = (
            clients.source_admin,
            clients.target_admin,
        )
        try:
            checkpointer.run_once(owned)
        except TimeoutError:
            log.info("admin requests timed out: reconnecting the admin clients")
            clients.renew_admins()
            raise

    def close(self) -> None:
        self.checkpointer.close()


def send_heartbeat(config: WorkerConfig, clients: Clients) -> None:
    """MirrorMaker 2's heartbeat record: consumers of the target see the flow is alive."""
    beat = Heartbeat(config.source.alias, config.target.alias, int(time.time() * 1000))
    clients.producer.produce(HEARTBEATS_TOPIC, key=beat.key(), value=beat.value())
