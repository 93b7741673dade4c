"""Refusals from the target that retrying cannot cure, what each one stops, and the reason people
read in the partition's commit metadata (and so in the mirror's `partitionProblems`).

As observed with librdkafka 2.16 (`enable.gapless.guarantee`) against Kafka 4.3, a permanent
error from the target reaches the worker in one of three ways:

- the broker refuses a batch the producer sent (an ACL denies Write; a compacted topic gets a
  record without a key: INVALID_RECORD): the whole producer fails, with a fatal error that names
  the batch's partition and the broker's error; the reported records of every batch that failed
  carry the same error in their delivery reports;
- the producer's metadata says it may not use the topic (an ACL that denies Write also denies
  Describe when nothing allows it): librdkafka puts the topic in an error state, fails every
  record of it that it held (the reported ones with that error, the others silently) and
  refuses new ones in produce() until its metadata of the topic is read again;
- a delivery report says so (the first way, seen record by record).

An authorization error concerns the whole remote topic; a record error its partition. Either
way the partitions concerned stop at their first unacknowledged record (records after it may
have failed unreported) and are tried again after a while; the other topics go on. Errors not
listed here are not known to be permanent: the worker retries them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from confluent_kafka import KafkaError

# Per error, what to do on the target to go on ({remote} is the remote topic).
TOPIC_REFUSALS = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: (
        "allow the mirror's principal to Write (and Describe) {remote} on the target"
    ),
}
_KEYLESS = (
    "if {remote} is compacted (a record without a key cannot go there), set its cleanup.policy "
    "to delete on the target"
)
RECORD_REFUSALS = {
    KafkaError.INVALID_RECORD: _KEYLESS,
    KafkaError.INVALID_MSG: _KEYLESS,  # CORRUPT_MESSAGE: older brokers' answer to the same
    KafkaError.MSG_SIZE_TOO_LARGE: "raise {remote}'s max.message.bytes on the target",
    KafkaError.RECORD_LIST_TOO_LARGE: "raise {remote}'s segment.bytes on the target",
    KafkaError.INVALID_TIMESTAMP: (
        "check {remote}'s message.timestamp.* settings on the target (a timestamp is out of "
        "their range)"
    ),
}
# librdkafka's gapless-guarantee failure: "ProduceRequest for <topic> [<p>] with <n> message(s)
# failed: <error's description> (broker <id> …): unable to satisfy gap-less guarantee".
_FAILED_BATCH = re.compile(r" for (\S+) \[(\d+)\] with \d+ message\(s\) failed: (.+?) \(broker ")
_BY_DESCRIPTION = {KafkaError(code).str(): code for code in (*TOPIC_REFUSALS, *RECORD_REFUSALS)}


@dataclass(frozen=True)
class PermanentRefusal:
    """The target refused a record of `remote`[`partition`] with `code`, for good."""

    remote: str
    partition: int
    code: int

    @property
    def whole_topic(self) -> bool:
        return self.code in TOPIC_REFUSALS

    def concerns(self, remote: str, partition: int) -> bool:
        return remote == self.remote and (self.whole_topic or partition == self.partition)

    def reason(self) -> str:
        """Why the partition stopped, and what to do about it (its Stop's reason)."""
        if self.whole_topic:
            what = f"the target refuses every record of {self.remote}"
            hint = TOPIC_REFUSALS[self.code]
        else:
            what = f"the target refused a record of {self.remote}[{self.partition}] at or after it"
            hint = RECORD_REFUSALS[self.code]
        error = KafkaError(self.code).str()
        return f"{what} ({error}): {hint.format(remote=self.remote)} to go on"


def permanent_refusal(code: int | None, remote: str, partition: int) -> PermanentRefusal | None:
    """The refusal, if `code` is one retrying cannot cure."""
    if code is None or (code not in TOPIC_REFUSALS and code not in RECORD_REFUSALS):
        return None
    return PermanentRefusal(remote, partition, code)


def refusal_in_fatal(message: str) -> PermanentRefusal | None:
    """The permanent refusal that failed the producer, read from its fatal error's message."""
    failed = _FAILED_BATCH.search(message)
    if failed is None:
        return None
    code = _BY_DESCRIPTION.get(failed.group(3))
    return permanent_refusal(code, failed.group(1), int(failed.group(2)))
