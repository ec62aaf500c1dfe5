"""The plumbing under :class:`eapo.rewards.judge.LLMJudge`, none of it the paper's: the endpoint
(:class:`Endpoint`: the ``openai`` async client on a private event loop, its key, its transport, its
retries), the retry policy — which HTTP failures are retried (:func:`retry_reason`) and how long to
wait before the next attempt (:func:`backoff_delay`) — and the disk cache of judgements. The judge's
errors live here and are importable from :mod:`eapo.rewards.judge`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")


class JudgeError(RuntimeError):
    """Base class of the judge's errors."""


class JudgeConfigError(JudgeError):
    """The endpoint rejects every request (bad key, unknown model or path): fix the configuration."""


class JudgeUnreachableError(JudgeError):
    """:meth:`LLMJudge.check_reachable` could not talk to the endpoint."""


# ---------------------------------------------------------------------------------------------
# The disk cache and the background event loop
# ---------------------------------------------------------------------------------------------


class DiskCache:
    """One small JSON file per judgement under ``root/<2 hex>/<sha256>.json``; safe across processes."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(model: str, prompt: str) -> str:
        return hashlib.sha256(f"{model}\x00{prompt}".encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, float] | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        scores = data.get("scores") if isinstance(data, dict) else None
        return scores if isinstance(scores, dict) else None

    def put(self, key: str, scores: dict[str, float]) -> None:
        from eapo.run_dir import atomic_write_text  # eapo.run_dir imports torch (through eapo.core)

        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # No fsync: an entry a crash loses costs one request again, and an fsync per judgement would
        # stall the judge's event loop, which runs this.
        atomic_write_text(path, json.dumps({"scores": scores}), fsync=False)


class LoopThread:
    """A private event loop on a daemon thread: the async client lives there, sync callers block on it.

    This makes the sync wrapper work both outside and inside a running event loop (a Jupyter cell,
    an async trainer): the caller's loop is never re-entered.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="eapo-llm-judge", daemon=True)
        self.thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.submit(coroutine).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


# ---------------------------------------------------------------------------------------------
# The endpoint: one client, its loop, its retries
# ---------------------------------------------------------------------------------------------


class Endpoint:
    """An OpenAI-compatible chat-completions endpoint as the judge reaches it: the ``openai`` async
    client, created on first use on a private event loop (:class:`LoopThread`) with the key read from
    the environment variable ``api_key_env``, at most ``concurrency`` requests in flight
    (:meth:`slot`), and each request retried after 408/409/429, 5xx, timeouts and connection errors
    up to ``max_retries`` times with backoff (:meth:`post`). ``stats`` is the judge's counter dict:
    ``requests`` and ``retries`` are counted here. Settings as :class:`~eapo.rewards.judge.LLMJudge`'s.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None,
        timeout: float,
        concurrency: int,
        http_backend: str,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        stats: dict[str, int],
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.concurrency = concurrency
        self.http_backend = http_backend
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stats = stats
        self._runner: LoopThread | None = None
        self._client: Any = None
        self._semaphore: asyncio.Semaphore | None = None
        self._random = random.Random()
        self._lock = threading.Lock()

    def loop(self) -> LoopThread:
        """The private event loop the requests run on, started on first use."""
        with self._lock:
            if self._runner is None:
                self._runner = LoopThread()
            return self._runner

    def client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client, created on first use; runs on the loop's thread."""
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self._api_key(),
                timeout=self.timeout,
                max_retries=0,  # retries are ours: backoff with jitter, counted in stats
                http_client=self._http_client(),
            )
            self._semaphore = asyncio.Semaphore(self.concurrency)
        return self._client

    def slot(self) -> asyncio.Semaphore:
        """The ``concurrency`` slots for requests in flight; a judgement holds one while it is asked."""
        self.client()
        assert self._semaphore is not None
        return self._semaphore

    async def post(self, body: dict[str, Any]) -> str:
        """The answer text to one chat-completion body, after transport retries.

        Raises:
            Refused: HTTP 400/422.
            GiveUp: retries exhausted, or another 4xx.
            JudgeConfigError: HTTP 401/403/404 (every request would fail).
        """
        import openai

        client = self.client()
        for attempt in range(self.max_retries + 1):
            try:
                self.stats["requests"] += 1
                # The SDK's generic POST: same auth, status-error mapping and transport as
                # chat.completions.create, without its typed-params transform (~1 ms of CPU a request,
                # which at 32 requests in flight is what bounds throughput).
                response = await client.post("/chat/completions", body=body, cast_to=object)
                return message_content(response)
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as error:
                raise JudgeConfigError(
                    f"llm_judge: {self.base_url} rejected the request with HTTP {error.status_code} "
                    f"({type(error).__name__}); check base_url, model={self.model!r}"
                    + (f" and the key in ${self.api_key_env}" if self.api_key_env else "")
                ) from error
            except (openai.APIStatusError, openai.APIConnectionError) as error:
                reason, retry_after = retry_reason(error, self.timeout)  # raises Refused / GiveUp
            if attempt == self.max_retries:
                raise GiveUp(f"{reason}; gave up after {self.max_retries} retries")
            self.stats["retries"] += 1
            jitter = self._random.random()
            await asyncio.sleep(
                backoff_delay(attempt, retry_after, self.backoff_base, self.backoff_max, jitter)
            )
        raise AssertionError("unreachable")

    async def served_models(self) -> list[str]:
        """The model names ``GET {base_url}/models`` lists.

        Raises:
            JudgeConfigError: the key's environment variable is unset, or the key is rejected.
            JudgeUnreachableError: the endpoint does not answer (naming ``base_url``).
        """
        import openai

        client = self.client()
        try:
            page = await client.models.list(timeout=self.timeout)
        except (openai.AuthenticationError, openai.PermissionDeniedError) as error:
            raise JudgeConfigError(
                f"llm_judge: {self.base_url} rejected the API key from ${self.api_key_env} "
                f"(HTTP {error.status_code}); export a valid key"
            ) from error
        except openai.APIError as error:
            cause = f"; cause: {error.__cause__}" if error.__cause__ else ""
            raise JudgeUnreachableError(
                f"llm_judge: the judge endpoint {self.base_url} is not reachable ({type(error).__name__}: "
                f"{error}{cause}); start the judge server or fix reward.llm_judge.base_url"
            ) from error
        return [model.id for model in page.data]

    def close(self) -> bool:
        """Close the HTTP client and stop the loop (both are made again on next use); whether there was
        a loop to stop."""
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is None:
            return False
        client, self._client, self._semaphore = self._client, None, None
        if threading.current_thread() is runner.thread:  # closing from the loop's own thread: just stop it
            runner.loop.call_soon(runner.loop.stop)
            return True
        if client is not None:
            try:
                runner.submit(client.close()).result(timeout=5)
            except Exception:  # closing is best effort
                logger.debug("llm_judge: error while closing the client", exc_info=True)
        runner.close()
        return True

    def _api_key(self) -> str:
        if self.api_key_env is None:
            return "EMPTY"  # vLLM / SGLang convention for "no key"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise JudgeConfigError(
                f"llm_judge: the environment variable {self.api_key_env} (api_key_env) is not set; export the "
                f"judge's API key there, or pass api_key_env=None for a server at {self.base_url} that needs no key"
            )
        return key

    def _http_client(self) -> Any:
        """The SDK's aiohttp transport when available ("auto"): ~2x less CPU per request than httpx at
        high concurrency, which is what bounds throughput on a small CPU."""
        import openai

        if self.http_backend == "httpx":
            return None
        try:
            return openai.DefaultAioHttpClient(timeout=self.timeout)
        except RuntimeError:  # the SDK's aiohttp support is not installed
            if self.http_backend == "aiohttp":
                raise JudgeConfigError(
                    "llm_judge: http_backend='aiohttp' needs aiohttp (pip install 'openai[aiohttp]')"
                ) from None
            return None


# ---------------------------------------------------------------------------------------------
# The retry policy
# ---------------------------------------------------------------------------------------------


class GiveUp(Exception):
    """Transport retries exhausted or a non-retryable 4xx: this sample scores None."""


class Refused(GiveUp):
    """HTTP 400/422: the server refused the request as formed (e.g. a ``response_format`` it lacks)."""


#: Statuses by which a server refuses a request as formed (:class:`Refused`).
REFUSAL_STATUS = {400, 422}
#: The 4xx statuses worth another attempt; every 5xx is too.
RETRYABLE_STATUS = {408, 409, 429}


def retry_reason(error: BaseException, timeout: float) -> tuple[str, float | None]:
    """``(reason, retry_after)`` for a failed attempt worth retrying: 408/409/429, 5xx, a timeout or a
    connection error, with the server's ``Retry-After`` in seconds when it sent one.

    ``error`` is an ``openai.APIStatusError`` or ``openai.APIConnectionError`` (the caller turns
    401/403/404 into a configuration error first).

    Raises:
        Refused: HTTP 400/422.
        GiveUp: any other 4xx.
    """
    import openai

    if isinstance(error, openai.APIStatusError):
        if error.status_code in REFUSAL_STATUS:
            raise Refused(f"HTTP {error.status_code}: {error.message}") from error
        if error.status_code not in RETRYABLE_STATUS and error.status_code < 500:
            raise GiveUp(f"HTTP {error.status_code}: {error.message}") from error
        return f"HTTP {error.status_code}", _retry_after_seconds(error.response)
    if isinstance(error, openai.APITimeoutError):
        return _timeout_or_connection_error(error, timeout), None
    return f"connection error ({error.__cause__ or error})", None


def backoff_delay(attempt: int, retry_after: float | None, base: float, cap: float, jitter: float) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): ``min(cap, base·2^attempt)`` times a factor
    in [0.5, 1] (``jitter`` is uniform in [0, 1)), at least ``Retry-After`` capped at ``cap``."""
    delay = min(cap, base * 2**attempt) * (0.5 + 0.5 * jitter)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


def message_content(response: Any) -> str:
    """``choices[0].message.content`` of a chat-completion JSON body; ``""`` (re-asked once) when absent."""
    try:
        content = response["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _timeout_or_connection_error(error: BaseException, timeout: float) -> str:
    """What an ``APITimeoutError`` was. The SDK's aiohttp transport maps every aiohttp connection error
    to a connect timeout, so a refused or dropped connection (a server that died) arrives as a
    "timeout" within milliseconds; only a ``TimeoutError`` in the cause chain is a real one."""
    causes: list[BaseException] = []
    cause = error.__cause__ or error.__context__
    while cause is not None and len(causes) < 8:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    if causes and not any(isinstance(cause, TimeoutError) for cause in causes):
        return f"connection error ({causes[-1]!r})"
    return f"timeout after {timeout:g} s"


def _retry_after_seconds(response: Any) -> float | None:
    try:
        value = response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None
