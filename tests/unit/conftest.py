"""The fixture the unit tests of the operations share (tests/unit/test_operations.py,
test_return.py)."""

from __future__ import annotations

import pytest

from tests.helpers.operations import FakeKafka


@pytest.fixture
def kafka() -> FakeKafka:
    """The mirror's two clusters, in memory: no group, no checkpoint, no commit yet."""
    return FakeKafka()
