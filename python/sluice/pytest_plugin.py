"""The pytest plugin (entry point ``pytest11``): the ``fake_api`` fixture."""

from __future__ import annotations

from typing import Iterator

import pytest

from .testing import FakeApi


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    """A fresh :class:`sluice.testing.FakeApi` for each test, closed after it."""
    with FakeApi() as fake:
        yield fake
