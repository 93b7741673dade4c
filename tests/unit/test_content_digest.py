"""The content check's record digest (tests/helpers/content.py): two records hash alike exactly
when their key, value, headers and timestamp are equal, so the check's verdicts are about the
records and never about how their fields happen to be cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.content import content_digest

optional_bytes = st.none() | st.binary(max_size=8)
records = st.tuples(
    optional_bytes,
    optional_bytes,
    st.lists(st.tuples(st.text(max_size=4), optional_bytes), max_size=3),
    st.integers(min_value=-1, max_value=2**62),
)


@given(records, records)
def test_two_records_hash_alike_exactly_when_they_are_equal(a: tuple, b: tuple) -> None:
    assert (content_digest(*a) == content_digest(*b)) == (a == b)


def test_fields_cut_differently_hash_apart() -> None:
    assert content_digest(b"ab", b"c", [], 0) != content_digest(b"a", b"bc", [], 0)
    assert content_digest(None, b"", [], 0) != content_digest(b"", None, [], 0)
    split = [("a", b"b"), ("c", None)]
    assert content_digest(b"k", b"v", [("a", b"bc")], 0) != content_digest(b"k", b"v", split, 0)


def test_equal_records_hash_alike_whatever_objects_hold_them() -> None:
    name, value = "seq", b"1"
    shared = [(name, value), (name, value)]  # the same objects twice
    separate = [("se" + "q", bytes([49])), ("s" + "eq", bytes([49]))]
    assert content_digest(b"k", value, shared, 5) == content_digest(b"k", b"1", separate, 5)
