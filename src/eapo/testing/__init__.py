"""Test doubles that are real services: :class:`JudgeServer`, a local OpenAI-compatible judge endpoint.

Used by the test suite and ``bench/judge.py``; needs ``aiohttp`` (a ``dev`` extra). Run one by
hand with ``python -m eapo.testing.judge_server --latency 0.1`` (it prints its base URL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eapo.testing.judge_server import Fault, JudgeServer

__all__ = ["Fault", "JudgeServer"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m eapo.testing.judge_server` does not import the module twice.
    if name in __all__:
        from eapo.testing import judge_server

        return getattr(judge_server, name)
    raise AttributeError(f"module 'eapo.testing' has no attribute {name!r}")
