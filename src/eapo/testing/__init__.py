"""Test doubles that are real services: :class:`JudgeServer`, a local OpenAI-compatible judge endpoint,
and :class:`FaultProxy`, a reverse proxy that injects faults in front of a real one (vLLM's).

Used by the test suite and ``bench/judge.py``; needs ``aiohttp``. Run a judge server by hand with
``python -m eapo.testing.judge_server --latency 0.1`` (it prints its base URL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eapo.testing.fault_proxy import FaultProxy
    from eapo.testing.judge_server import Fault, JudgeServer

__all__ = ["Fault", "JudgeServer", "FaultProxy"]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m eapo.testing.judge_server` does not import the module twice.
    if name == "FaultProxy":
        from eapo.testing import fault_proxy

        return fault_proxy.FaultProxy
    if name in __all__:
        from eapo.testing import judge_server

        return getattr(judge_server, name)
    raise AttributeError(f"module 'eapo.testing' has no attribute {name!r}")
