"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for testing the LLM judge.

It speaks the wire protocol the ``openai`` client speaks (``POST /v1/chat/completions``,
``GET /v1/models``) over a real socket, so tests exercise the client, timeouts and retries for
real — nothing is monkeypatched. The judge's answer is a JSON object scoring every dimension the
prompt asks for (found in the prompt's output contract) with ``scores[key]`` or ``default_score``.

Faults are injected per prompt: ``server.inject("MARKER", Fault.status(429), Fault.ok())`` makes
the next requests whose prompt contains ``MARKER`` get a 429, then a normal answer; once a
marker's faults are used up its requests are answered normally. Concurrent requests for different
markers therefore see deterministic faults. ``request_count`` counts chat-completion requests.
``response_formats`` lists the ``response_format`` types the server accepts; a request asking for
another gets HTTP 400, as from a server without structured outputs.

Usage::

    with JudgeServer(latency=0.1) as server:
        judge = LLMJudge(base_url=server.base_url, model=server.model, api_key_env=None)
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal, Self

from aiohttp import web

__all__ = ["JudgeServer", "Fault"]

_CONTRACT_KEY = re.compile(r'"([A-Za-z0-9_]+)": <number 0-100>')


@dataclass(frozen=True)
class Fault:
    """What the server does with one request."""

    kind: Literal["ok", "slow", "status", "malformed", "out_of_range", "content"]
    seconds: float = 0.0
    status_code: int = 200
    retry_after: float | None = None
    text: str = ""

    @classmethod
    def ok(cls) -> Fault:
        """A normal answer."""
        return cls("ok")

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """A normal answer after ``seconds`` (longer than the client's timeout → a client timeout)."""
        return cls("slow", seconds=seconds)

    @classmethod
    def status(cls, code: int, retry_after: float | None = None) -> Fault:
        """An OpenAI-style error body with HTTP ``code`` (and a ``Retry-After`` header when given)."""
        return cls("status", status_code=code, retry_after=retry_after)

    @classmethod
    def malformed(cls) -> Fault:
        """A 200 answer whose content is not JSON."""
        return cls("malformed")

    @classmethod
    def out_of_range(cls) -> Fault:
        """A 200 answer whose JSON scores one dimension 150."""
        return cls("out_of_range")

    @classmethod
    def content(cls, text: str) -> Fault:
        """A 200 answer with exactly ``text`` as the message content."""
        return cls("content", text=text)


class ThreadedServer:
    """An aiohttp site on its own thread and event loop, with ``start()`` / ``stop()`` and a context
    manager. Subclasses set ``_thread_name``, start their site in ``_start_site`` (setting
    ``self._runner`` and ``self.port``) and close anything else they hold in ``_shutdown``."""

    _thread_name = "eapo-server"
    host: str
    port: int
    _runner: Any
    _loop: asyncio.AbstractEventLoop | None
    _thread: threading.Thread | None

    async def _start_site(self) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self) -> Self:
        if self._thread is not None:
            return self
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._start_site())
            except BaseException as error:  # surfaced to start()'s caller
                failure.append(error)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name=self._thread_name, daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        if failure:
            raise RuntimeError(
                f"{type(self).__name__} could not start on {self.host}:{self.port}: {failure[0]}"
            ) from failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        loop = self._loop
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=10)
        loop.close()
        self._thread = self._loop = self._runner = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class JudgeServer(ThreadedServer):
    """An aiohttp chat-completions server on its own thread and event loop.

    Args:
        latency: seconds every chat-completion request waits before answering.
        scores: per-dimension scores to answer with (by JSON key); others get ``default_score``.
        default_score: the score of a dimension not in ``scores``.
        model: the model name ``GET /v1/models`` lists.
        api_key: when set, requests without ``Authorization: Bearer <api_key>`` get HTTP 401.
        response_formats: the ``response_format`` types accepted (``json_schema``, ``json_object``);
            a request with any other gets HTTP 400. The answer is the same JSON either way.
        port: 0 picks a free port.
    """

    _thread_name = "eapo-judge-server"

    def __init__(
        self,
        *,
        latency: float = 0.0,
        scores: dict[str, float] | None = None,
        default_score: float = 80.0,
        model: str = "test-judge",
        api_key: str | None = None,
        response_formats: tuple[str, ...] = ("json_schema", "json_object"),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.latency = latency
        self.scores = dict(scores or {})
        self.default_score = default_score
        self.model = model
        self.api_key = api_key
        self.response_formats = tuple(response_formats)
        self.host = host
        self.port = port
        self.requests: list[dict[str, Any]] = []
        self.status_counts: Counter[int] = Counter()
        self.models_requests = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._faults: dict[str, list[Fault]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._runner is None:
            raise RuntimeError("JudgeServer is not running; call start() or use it as a context manager")
        return f"http://{self.host}:{self.port}/v1"

    async def _start_site(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    # -- faults and counters ---------------------------------------------------------------------

    def inject(self, marker: str, *faults: Fault) -> None:
        """Queue ``faults`` for the next requests whose prompt contains ``marker`` (in order)."""
        with self._lock:
            self._faults.setdefault(marker, []).extend(faults)

    def pending_faults(self, marker: str) -> int:
        with self._lock:
            return len(self._faults.get(marker, []))

    @property
    def request_count(self) -> int:
        """Chat-completion requests received (``GET /v1/models`` is counted in ``models_requests``)."""
        with self._lock:
            return len(self.requests)

    def requests_containing(self, marker: str) -> int:
        with self._lock:
            return sum(1 for body in self.requests if marker in _prompt_of(body))

    def reset(self) -> None:
        """Forget received requests, counters and pending faults."""
        with self._lock:
            self.requests.clear()
            self.status_counts.clear()
            self._faults.clear()
            self.models_requests = 0
            self.max_in_flight = 0

    # -- handlers --------------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _next_fault(self, prompt: str) -> Fault:
        with self._lock:
            for marker, queue in self._faults.items():
                if queue and marker in prompt:
                    return queue.pop(0)
        return Fault.ok()

    def _answer(self, prompt: str) -> dict[str, float]:
        keys = _CONTRACT_KEY.findall(prompt) or list(self.scores)
        return {key: self.scores.get(key, self.default_score) for key in keys}

    def _completion(self, content: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-test-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _respond(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> web.Response:
        with self._lock:
            self.status_counts[status] += 1
        return web.json_response(body, status=status, headers=headers)

    async def _models(self, request: web.Request) -> web.Response:
        with self._lock:
            self.models_requests += 1
        if not self._authorised(request):
            return self._respond(401, _error("invalid api key", "invalid_request_error"))
        return self._respond(
            200,
            {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "eapo"}],
            },
        )

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = _prompt_of(body)
        with self._lock:
            self.requests.append(body)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            if not self._authorised(request):
                return self._respond(401, _error("invalid api key", "invalid_request_error"))
            response_format = (body.get("response_format") or {}).get("type")
            if response_format is not None and response_format not in self.response_formats:
                return self._respond(
                    400,
                    _error(
                        f"response_format type {response_format!r} is not supported", "invalid_request_error"
                    ),
                )
            fault = self._next_fault(prompt)
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            if fault.kind == "slow":
                await asyncio.sleep(fault.seconds)
            if fault.kind == "status":
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
                return self._respond(
                    fault.status_code, _error(f"injected HTTP {fault.status_code}", "server_error"), headers
                )
            scores = self._answer(prompt)
            if fault.kind == "malformed":
                content = "Scores: logical coherence 80, knowledge 70 (not JSON) {"
            elif fault.kind == "out_of_range":
                first = next(iter(scores), "score")
                content = json.dumps({**scores, first: 150})
            elif fault.kind == "content":
                content = fault.text
            else:
                content = json.dumps(scores)
            return self._respond(200, self._completion(content))
        finally:
            with self._lock:
                self._in_flight -= 1


def _prompt_of(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    return "\n".join(str(message.get("content", "")) for message in messages if isinstance(message, dict))


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def main(argv: list[str] | None = None) -> None:
    """``python -m eapo.testing.judge_server --latency 0.1``: serve until killed; prints the base URL first."""
    import argparse

    parser = argparse.ArgumentParser(
        description="A local OpenAI-compatible judge server for tests and benchmarks."
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every chat completion waits")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--model", default="test-judge", help="the model name /v1/models lists")
    parser.add_argument("--default-score", type=float, default=80.0, help="the score of every dimension")
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="stop when stdin closes (the parent process ended)"
    )
    args = parser.parse_args(argv)
    server = JudgeServer(
        latency=args.latency, port=args.port, model=args.model, default_score=args.default_score
    )
    server.start()
    print(server.base_url, flush=True)
    stop = threading.Event()
    if args.exit_on_stdin_eof:
        import sys

        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
