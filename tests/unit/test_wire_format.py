"""Confluent's wire format (kafka_mirror.kafka.wire_format): the workers rewrite only the 4
bytes of the schema id, and only of data in the format whose id they know."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.kafka.wire_format import HEADER_BYTES, schema_id, translated

ids = st.integers(min_value=0, max_value=2**32 - 1)


def framed(schema: int, payload: bytes) -> bytes:
    return b"\0" + schema.to_bytes(4, "big") + payload


@given(ids, ids, st.binary(max_size=200))
def test_the_id_is_replaced_and_nothing_else(source: int, target: int, payload: bytes) -> None:
    copy = translated(framed(source, payload), {source: target})
    assert copy == framed(target, payload)
    assert (
        copy is not None and schema_id(copy) == target and len(copy) == HEADER_BYTES + len(payload)
    )


@given(ids, st.binary(max_size=200), st.dictionaries(ids, ids))
def test_an_unknown_id_waits(source: int, payload: bytes, known: dict[int, int]) -> None:
    known.pop(source, None)
    assert translated(framed(source, payload), known) is None


@given(st.binary(max_size=200), st.dictionaries(ids, ids))
def test_data_not_in_the_format_is_copied_as_it_is(data: bytes, known: dict[int, int]) -> None:
    if len(data) >= HEADER_BYTES and data[0] == 0:
        data = b"\1" + data[1:]
    assert schema_id(data) is None
    assert translated(data, known) == data
