"""Confluent's wire format: a key or value that starts with the zero byte and the 4-byte
big-endian id of its schema in a registry, then the serialized data."""

from __future__ import annotations

MAGIC_BYTE = 0
HEADER_BYTES = 5


def schema_id(data: bytes) -> int | None:
    """The schema id `data` carries; None when it is not in the wire format."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC_BYTE:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def translated(data: bytes, ids: dict[int, int]) -> bytes | None:
    """`data` with its schema id replaced by the one `ids` maps it to (as it is when it is not
    in the wire format, or the id stays); None when `ids` does not know its id (yet)."""
    source = schema_id(data)
    if source is None:
        return data
    target = ids.get(source)
    if target is None:
        return None
    if target == source:
        return data
    return bytes((MAGIC_BYTE,)) + target.to_bytes(4, "big") + data[HEADER_BYTES:]
