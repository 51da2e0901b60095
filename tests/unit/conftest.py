"""Unit tests' shared set-up: each test starts with no address seen alive, as a new process does
(:mod:`tubespark.core.outage`: an address option never seen alive fails fast, one seen alive is waited for), so
a test's outcome never depends on which fake broker an earlier test ran on the same port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tubespark.core.outage import forget_all


@pytest.fixture(autouse=True)
def _new_process_view_of_addresses() -> Iterator[None]:
    forget_all()
    yield
    forget_all()
