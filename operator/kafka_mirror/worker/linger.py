"""The mirroring producer's `linger.ms` by what the mirror does: short while it keeps up with the
source, long while it drains a backlog.

Draining, a batch that lingers longer than an answer from the target takes fills instead of
going out in pieces: fewer, larger produce requests, less work for the producer (2.45-2.56
CPU µs per 100 B record for the whole process against 2.62-2.82 with a fixed 5 ms,
`bench/worker_cpu.py`, docs/performance.md). It costs no latency there: the records waited in
the backlog anyway. Caught up, the short linger sends each record at once. (It was first needed
against a spin of librdkafka's idempotent producer while an answer was out, which one request
in flight per connection now prevents: `clients.ONE_REQUEST_IN_FLIGHT`.)

A producer's linger is fixed, so a change is a new producer, and only once the old one has
handed the target every record with a report for each (records of one partition in two
producers could overtake each other, and the new producer's reports vouch for nothing the old
one held). A mirror whose `config` sets the linger keeps it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaException

from kafka_mirror.worker.clients import MIRROR_PRODUCER_TUNING, Clients
from kafka_mirror.worker.flows import PartitionFlow

log = logging.getLogger(__name__)

CAUGHT_UP_LINGER_MS: int = MIRROR_PRODUCER_TUNING["linger.ms"]
DRAINING_LINGER_MS = 100  # longer than an answer takes under load (20-50 ms measured here)
DRAINING_AFTER_SECONDS = 1.0  # of full batches: a backlog, not a burst
FULL_BATCH_GAP_SECONDS = 0.5  # a short batch this long after a full one: no backlog yet
# Of short batches only (the consumer had nothing more), with no full one: in a drain the
# consumer runs short now and then while it waits for a fetch.
CAUGHT_UP_AFTER_SECONDS = 2.0
SWITCH_FLUSH_SECONDS = 10.0
SWITCH_RETRY_SECONDS = 30.0  # after a switch that could not be done
LINGER_SETTINGS = ("linger.ms", "queue.buffering.max.ms")


class LingerPolicy:
    """Draining once the consumer has handed out full batches for DRAINING_AFTER_SECONDS, none
    a short batch FULL_BATCH_GAP_SECONDS after the last (a full batch now and then, as after a
    pause at a steady rate, is no backlog); caught up once it has handed out only short ones for
    CAUGHT_UP_AFTER_SECONDS. (While a full producer queue holds the loop to the rest of a batch,
    no batch comes: no sign either way.)"""

    def __init__(self) -> None:
        self.draining = False
        self.full_since: float | None = None  # since when batches come full
        self.last_full = 0.0
        self.short_since: float | None = None  # since when they come short

    def wants_draining(self, full: bool, now: float) -> bool:
        if full:
            self.short_since = None
            if self.full_since is None:
                self.full_since = now
            self.last_full = now
        else:
            if self.short_since is None:
                self.short_since = now
            caught_up = now - self.short_since >= CAUGHT_UP_AFTER_SECONDS
            if caught_up or (not self.draining and now - self.last_full > FULL_BATCH_GAP_SECONDS):
                self.full_since = None
        return self.full_since is not None and now - self.full_since >= DRAINING_AFTER_SECONDS


class LingerSwitch:
    """Renews the producer with the linger the policy wants, when it is safe to (else again
    SWITCH_RETRY_SECONDS later)."""

    def __init__(
        self,
        clients: Clients,
        flows: Callable[[], Iterable[PartitionFlow]],
        on_producer_failed: Callable[[str], None],
    ) -> None:
        self.clients, self.flows, self.on_producer_failed = clients, flows, on_producer_failed
        self.policy = LingerPolicy()
        self.retry_at = 0.0

    @property
    def draining(self) -> bool:
        return self.policy.draining

    def after_batch(self, full: bool) -> None:
        """Called by the loop with each consumed batch (`full`: as many records as it asked
        for), before it is sent."""
        now = time.monotonic()
        draining = self.policy.wants_draining(full, now)
        if draining == self.draining or now < self.retry_at:
            return
        why = self.switch(draining)
        if why is not None:
            log.info("the producer's linger stays for now (%s)", why)
            self.retry_at = now + SWITCH_RETRY_SECONDS

    def switch(self, draining: bool) -> str | None:
        """Renew the producer with the linger `draining` wants; else say why not now."""
        # A record queued after its partition's last report (a run cut by a full queue or a
        # stop) is vouched for only by a later report of the same producer: not now, then.
        if not self._vouched(waiting_allowed=True):
            return "a record without a report to come"
        try:
            remaining = self.clients.producer.flush(SWITCH_FLUSH_SECONDS)
        except (KafkaException, SystemError) as error:
            self.on_producer_failed(str(error))  # the loop replaces it
            return "the producer failed"
        if remaining:
            return f"{remaining} records unacknowledged after {SWITCH_FLUSH_SECONDS:.0f}s"
        if not self._vouched(waiting_allowed=False):
            return "a record refused"
        linger = DRAINING_LINGER_MS if draining else CAUGHT_UP_LINGER_MS
        self.clients.renew_producer(linger)
        self.policy.draining = draining
        log.info(
            "%s: the producer lingers %d ms",
            "draining a backlog" if draining else "caught up",
            linger,
        )
        return None

    def _vouched(self, waiting_allowed: bool) -> bool:
        """Every record the producer holds has a report on its way (or came with one, unless
        `waiting_allowed`), and none was refused."""
        return all(
            flow.refused is None
            and not flow.unreported_records
            and (waiting_allowed or not flow.in_flight)
            for flow in self.flows()
        )
