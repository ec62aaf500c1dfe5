"""Fixtures of the rewards tests: a real local chat-completions judge server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eapo.testing import JudgeServer


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server
