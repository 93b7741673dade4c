"""The size a record takes on the wire alone in a batch, as the broker measures it against a
topic's `max.message.bytes` (Kafka's record batch format v2, uncompressed)."""

from __future__ import annotations

from collections.abc import Sequence

BATCH_OVERHEAD = 61  # the v2 batch header: base offset, length, epoch, magic, CRC, …


def _varint_bytes(value: int) -> int:
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _field(data: bytes | str | None) -> int:
    if data is None:
        return _varint_bytes(-1)
    length = len(data.encode() if isinstance(data, str) else data)
    return _varint_bytes(length) + length


def single_record_batch_bytes(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, str | bytes | None]]
) -> int:
    """Bytes of a batch holding only this record (timestamp and offset deltas 0)."""
    body = 3 + _field(key) + _field(value) + _varint_bytes(len(headers))
    for name, data in headers:
        body += _field(name) + _field(data)
    return BATCH_OVERHEAD + _varint_bytes(body) + body
