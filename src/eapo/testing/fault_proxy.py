"""A fault-injecting reverse proxy in front of a real OpenAI-compatible server (e.g. vLLM's).

The judge's client talks to the proxy; the proxy passes every request to the real server and relays
its answer, unless a fault is set for chat completions:

* ``proxy.inject(Fault.slow(s))``: the real server is asked at once, its answer relayed ``s`` seconds
  late (a server slower than the client's timeout). ``late`` counts such answers and ``abandoned``
  those whose client had already hung up when the answer was due;
* ``proxy.inject(Fault.status(503, retry_after=2), for_seconds=3)``: an OpenAI-style error with that
  status, without asking the server, for ``for_seconds`` from the first request that meets the
  fault (``None``: until :meth:`clear`), i.e. a server that returns 503 for a while.

``GET /v1/models`` is always passed through. ``exchanges`` records each chat completion's prompt,
status and answer text, so a test can tell what the real server answered.

Usage::

    with FaultProxy(vllm.base_url) as proxy:
        judge = LLMJudge(base_url=proxy.base_url, ...)
        proxy.inject(Fault.status(503), for_seconds=3.0)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from eapo.testing.judge_server import Fault, ThreadedServer, _error, _prompt_of

__all__ = ["FaultProxy", "Exchange"]


@dataclass(frozen=True)
class Exchange:
    """One chat completion through the proxy."""

    prompt: str
    status: int
    content: str | None  # the answer's message text (None for an error or an answer never relayed)
    fault: str  # "ok", "slow" or "status"


class FaultProxy(ThreadedServer):
    """An aiohttp reverse proxy on its own thread, in front of ``upstream`` (a ``.../v1`` base URL)."""

    _thread_name = "eapo-fault-proxy"

    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.port = port
        self.exchanges: list[Exchange] = []
        self.status_counts: Counter[int] = Counter()
        self.late = 0
        self.abandoned = 0
        self._fault: Fault | None = None
        self._for_seconds: float | None = None
        self._fault_until: float | None = None
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        if self._runner is None:
            raise RuntimeError("FaultProxy is not running; call start() or use it as a context manager")
        return f"http://{self.host}:{self.port}/v1"

    # -- faults ----------------------------------------------------------------------------------

    def inject(self, fault: Fault, *, for_seconds: float | None = None) -> None:
        """Apply ``fault`` (``slow`` or ``status``) to every chat completion from now on: for
        ``for_seconds`` counted from the first request that meets it, or until :meth:`clear`."""
        if fault.kind not in ("slow", "status"):
            raise ValueError(f"FaultProxy injects slow or status faults, not {fault.kind!r}")
        with self._lock:
            self._fault, self._for_seconds, self._fault_until = fault, for_seconds, None

    def clear(self) -> None:
        """Relay every request untouched again."""
        with self._lock:
            self._fault = self._for_seconds = self._fault_until = None

    def _current_fault(self) -> Fault | None:
        with self._lock:
            if self._fault is None:
                return None
            now = time.monotonic()
            if self._for_seconds is not None:
                if self._fault_until is None:
                    self._fault_until = now + self._for_seconds
                elif now >= self._fault_until:
                    self._fault = self._for_seconds = self._fault_until = None
                    return None
            return self._fault

    def answered(self, since: int = 0) -> list[Exchange]:
        """The exchanges (from the ``since``-th on) the real server answered with 200 and that reached
        the client."""
        with self._lock:
            return [e for e in self.exchanges[since:] if e.status == 200 and e.content is not None]

    # -- lifecycle -------------------------------------------------------------------------------

    async def _start_site(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        await super()._shutdown()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- handlers --------------------------------------------------------------------------------

    def _record(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)
            self.status_counts[exchange.status] += 1

    async def _models(self, request: web.Request) -> web.Response:
        assert self._session is not None
        async with self._session.get(f"{self.upstream}/models", headers=_forwarded(request)) as upstream:
            return web.Response(
                status=upstream.status, body=await upstream.read(), content_type="application/json"
            )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        raw = await request.read()
        try:
            prompt = _prompt_of(await request.json())
        except ValueError:
            prompt = ""
        fault = self._current_fault()
        if fault is not None and fault.kind == "status":
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
            self._record(Exchange(prompt, fault.status_code, None, "status"))
            return web.json_response(
                _error(f"injected HTTP {fault.status_code}", "server_error"),
                status=fault.status_code,
                headers=headers,
            )
        async with self._session.post(
            f"{self.upstream}/chat/completions", data=raw, headers=_forwarded(request)
        ) as upstream:
            status, body = upstream.status, await upstream.read()
        if fault is not None and fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
            transport = request.transport
            gone = transport is None or transport.is_closing()
            with self._lock:
                self.late += 1
                self.abandoned += gone
            if gone:
                self._record(Exchange(prompt, status, None, "slow"))
                return web.Response(status=status, body=body, content_type="application/json")
        self._record(
            Exchange(prompt, status, _content(body) if status == 200 else None, fault.kind if fault else "ok")
        )
        return web.Response(status=status, body=body, content_type="application/json")


def _forwarded(request: web.Request) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    return headers


def _content(body: bytes) -> str | None:
    import json

    try:
        content: Any = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
