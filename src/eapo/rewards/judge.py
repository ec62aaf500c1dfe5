"""The LLM-as-a-Judge reward ``r_llm(x, y, d̂) ∈ [0, 1]`` of Section 2.3 of the EAPO paper: the client.

The paper's part — the two appendix prompts, their dimensions and weights, the parsing of an answer
and the weighted overall score — is :mod:`eapo.rewards.judge_prompts` (its names are importable from
here too). This module sends those prompts and turns the answers into rewards:

* ``target="think"`` (training, the paper's reward): the reasoning inside ``<think>``;
* ``target="response"`` (the evaluation metric LAAJ): the answer;
* ``target="both"``: the mean of the two overall scores (``None`` when either is missing).

The judge is any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, DeepSeek, OpenAI),
reached through the official ``openai`` async client. The overall score ``Σ w_k·s_k`` of its
per-dimension scores is mapped from 0–100 to [0, 1]. A completion with no ``<think>`` content
scores 0.0 under ``target="think"`` (there is no reasoning to credit; the judge is not called), and
so does an empty answer under ``target="response"``. The share of graded texts that address their
judge (:func:`~eapo.rewards.judge_prompts.addresses_judge`) in a batch is logged as
``reward/llm_judge/injection_frac``: a policy that learns to write them is reward hacking, which a
user must see.

Structured outputs: every request asks for its exact answer shape — a JSON object with one
integer 0–100 per dimension and nothing else (:func:`score_schema`) — through the OpenAI
``response_format`` JSON-schema form, which constrained decoders (vLLM, SGLang) enforce, so a small
judge cannot emit a weight or a 0–1 ratio where the 100-point score goes. ``structured_output``
chooses the form: ``json_schema``, ``json_object`` (valid JSON only), ``plain`` (the prompt's output
contract alone) or ``auto`` (default): one cheap probe request finds the first of those the server
accepts (a server refuses a form with HTTP 400/422) and every later request uses it.

Robustness (the plumbing is :mod:`eapo.rewards.judge_transport`): at most ``concurrency`` requests
in flight; a per-request ``timeout``; 429, 408, 409, 5xx, timeouts and connection errors are retried
up to ``max_retries`` times with exponential backoff and jitter (honouring ``Retry-After``); an
unparseable or out-of-range answer is asked for once more, then scores ``None``; 401/403/404 raise
:class:`JudgeConfigError` (every sample would fail); other 4xx score ``None``. Successful judgements
are cached on disk (``cache_dir``) keyed by ``sha256(model, prompt)``, so re-scoring the same
completions makes no requests.

Per-dimension scores of the last call are in :attr:`LLMJudge.last_details` (one flat dict per
sample, e.g. ``{"think/judged": 1.0, "think/logical_coherence": 80.0, …, "think/overall": 78.5}``),
which the composite reward turns into ``reward/llm_judge/<key>/mean`` metrics. ``<kind>/judged`` is
1.0 when the judge was asked (whatever came of it) and 0.0 when there was nothing to judge, so
``reward/llm_judge/think/judged/mean`` is the share of rollouts the judge read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any, Literal

from eapo.rewards.base import as_text, check_batch, prompt_text
from eapo.rewards.extract import extract_answer, extract_think
from eapo.rewards.judge_prompts import (
    DIMENSIONS,
    RESPONSE_DIMENSIONS,
    RESPONSE_PROMPT,
    THINK_DIMENSIONS,
    THINK_PROMPT,
    Dimension,
    JudgeParseError,
    addresses_judge,
    build_prompt,
    embed_graded_text,
    parse_scores,
    score_schema,
    weighted_overall,
)
from eapo.rewards.judge_transport import (
    DiskCache,
    Endpoint,
    GiveUp,
    JudgeConfigError,
    JudgeError,
    JudgeUnreachableError,
    Refused,
)

__all__ = [
    "LLMJudge",
    "Dimension",
    "STRUCTURED_OUTPUTS",
    "score_schema",
    "THINK_DIMENSIONS",
    "RESPONSE_DIMENSIONS",
    "THINK_PROMPT",
    "RESPONSE_PROMPT",
    "build_prompt",
    "embed_graded_text",
    "addresses_judge",
    "parse_scores",
    "weighted_overall",
    "JudgeError",
    "JudgeConfigError",
    "JudgeUnreachableError",
    "JudgeParseError",
    "TARGETS",
]

logger = logging.getLogger(__name__)

Target = Literal["think", "response", "both"]
TARGETS = ("think", "response", "both")
#: How a request asks for its answer's shape: ``auto`` probes the server once for the first of the
#: others it accepts, in this order (see the module docstring).
STRUCTURED_OUTPUTS = ("auto", "json_schema", "json_object", "plain")


class LLMJudge:
    """``r_llm``: an LLM judge's weighted score of the reasoning and/or the answer, in [0, 1].

    Args:
        base_url: the OpenAI-compatible endpoint, e.g. ``http://localhost:8000/v1`` (vLLM) or
            ``https://api.deepseek.com/v1``.
        model: the judge model name the endpoint serves (the paper uses DeepSeek-V3.2).
        api_key_env: the *name* of the environment variable holding the API key (the key is read
            when the client is created and never logged); ``None`` for servers that need no key.
        target: ``"think"`` (default; the paper's training reward), ``"response"`` (the LAAJ
            evaluation prompt) or ``"both"``.
        concurrency: maximum requests in flight.
        timeout: seconds per request attempt (connect, and each wait for response bytes).
        max_retries: retries of one request after 429/5xx/timeouts/connection errors.
        backoff_base, backoff_max: the n-th retry waits ``min(backoff_max, backoff_base·2^n)`` times
            a jitter factor in [0.5, 1] (at least the server's ``Retry-After``, capped at ``backoff_max``).
        temperature, max_tokens: sampling settings of the judge request.
        cache_dir: directory of the disk cache (``None``: no cache).
        structured_output: how each request asks for the answer's shape: ``"json_schema"`` (the
            exact shape, :func:`score_schema`; vLLM and SGLang enforce it while decoding),
            ``"json_object"`` (any JSON object), ``"plain"`` (the prompt's output contract only) or
            ``"auto"`` (default: the first of those the server accepts, probed once).
        extract: which part of the completion the ``"response"`` prompt judges (see
            :func:`eapo.rewards.extract_answer`).
        http_backend: the SDK's transport — ``"aiohttp"`` (``openai.DefaultAioHttpClient``),
            ``"httpx"`` (the SDK default) or ``"auto"`` (aiohttp when installed).

    Call it like any reward (sync), or ``await judge.ascore(...)``. Pass ``questions=[...]`` to
    use the bare patient questions as ``{query}`` instead of the prompts (which may hold the
    instruction template); chat-format prompts contribute their last user message.
    """

    name = "llm_judge"
    #: Options no longer taken, with what replaces each (:func:`eapo.rewards.make_reward` names it).
    removed_options = {"json_mode": "structured_output: json_object"}

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        target: Target = "think",
        concurrency: int = 32,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff_base: float = 1.0,
        backoff_max: float = 30.0,
        temperature: float = 0.0,
        max_tokens: int = 512,
        cache_dir: str | os.PathLike[str] | None = None,
        structured_output: str = "auto",
        http_backend: Literal["auto", "aiohttp", "httpx"] = "auto",
        extract: str = "advice",
    ) -> None:
        _checked_settings(
            base_url=base_url,
            model=model,
            target=target,
            concurrency=concurrency,
            timeout=timeout,
            max_retries=max_retries,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            structured_output=structured_output,
            extract=extract,
            http_backend=http_backend,
            api_key_env=api_key_env,
        )
        assert base_url and model  # checked above
        self.base_url = base_url
        self.model = model
        self.api_key_env = api_key_env
        self.target = target
        self.concurrency = concurrency
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.temperature = float(temperature)
        self.max_tokens = int(max_tokens)
        self.structured_output = structured_output
        #: The response format requests use: the configured one, or with ``auto`` the one the probe
        #: found (``None`` until the server has answered a probe).
        self.output_format: str | None = None if structured_output == "auto" else structured_output
        self.http_backend = http_backend
        self.extract = extract
        self.__name__ = self.name  # TRL names reward functions by __name__
        self.cache = DiskCache(cache_dir) if cache_dir is not None else None
        self.label = f"LLM judge ({model} at {base_url}, target={target})"
        #: Per-sample flat dicts from the last call (see the module docstring); None for unscored samples.
        self.last_details: list[dict[str, Any] | None] = []
        #: Batch-level metrics of the last call: ``injection_frac``, the share of graded texts that
        #: address the judge (:func:`addresses_judge`; NaN when nothing was graded).
        self.last_metrics: dict[str, float] = {}
        self._warned_injection = False
        #: Running counters: requests sent (probes included), retries, cache hits, re-asks after a bad
        #: answer, failures, and the probe requests of ``structured_output="auto"``.
        self.stats = {"requests": 0, "retries": 0, "cache_hits": 0, "reasks": 0, "failures": 0, "probes": 0}
        self._probe: asyncio.Future[str] | None = None
        self._endpoint = Endpoint(
            base_url=base_url,
            model=model,
            api_key_env=api_key_env,
            timeout=self.timeout,
            concurrency=concurrency,
            http_backend=http_backend,
            max_retries=max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            stats=self.stats,
        )

    # -- the public calls: a batch in, one reward per sample out ---------------------------------

    def __call__(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        *,
        questions: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        inputs = self._inputs(prompts, completions, references, questions)
        scores, self.last_details = self._endpoint.loop().run(self._score(*inputs))
        return scores

    async def ascore(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        *,
        questions: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Async scoring; awaitable from any event loop (the requests run on the judge's own loop)."""
        inputs = self._inputs(prompts, completions, references, questions)
        future = self._endpoint.loop().submit(self._score(*inputs))
        scores, self.last_details = await asyncio.wrap_future(future)
        return scores

    def _inputs(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        references: Sequence[str | None] | None,
        questions: Sequence[str] | None,
    ) -> tuple[list[str], list[str | None], list[str]]:
        check_batch(self.name, prompts, completions, references, needs_references=True)
        assert references is not None
        if questions is not None:
            if len(questions) != len(completions):
                raise ValueError(
                    f"llm_judge: questions has {len(questions)} entries but completions has {len(completions)}"
                )
            queries = [as_text(question) for question in questions]
        elif prompts is not None:
            queries = [prompt_text(prompt) for prompt in prompts]
        else:
            raise ValueError("llm_judge needs the questions: pass prompts or questions=[...]")
        return queries, list(references), [as_text(completion) for completion in completions]

    # -- scoring: a batch -> each sample -> each prompt ------------------------------------------

    async def _score(
        self, queries: list[str], references: list[str | None], completions: list[str]
    ) -> tuple[list[float | None], list[dict[str, Any] | None]]:
        async def one(index: int) -> tuple[float | None, dict[str, Any] | None]:
            reference = references[index]
            if reference is None:
                return None, None
            return await self._score_one(queries[index], reference, completions[index])

        self._endpoint.client()  # a missing key fails here, before any request
        if self.output_format is None and self._probe is not None and self._probe.done():
            self._probe = None  # the last probe reached no server: this batch probes again
        try:
            # A TaskGroup cancels the other requests as soon as one raises (JudgeConfigError: every
            # sample would fail the same way).
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(index)) for index in range(len(completions))]
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None
        results = [task.result() for task in tasks]
        scores = [score for score, _ in results]
        details = [detail for _, detail in results]
        self.last_metrics = {"injection_frac": self._injection_frac(details)}
        self._count_failures(results)
        return scores, details

    async def _score_one(
        self, query: str, reference: str, completion: str
    ) -> tuple[float | None, dict[str, Any]]:
        """The reward of one completion in [0, 1] (the mean overall of the target's prompts, ``None``
        when one is unscored) and its flat details (see the module docstring)."""
        kinds = ("think", "response") if self.target == "both" else (self.target,)
        details: dict[str, Any] = {}
        overall: list[float | None] = []
        pending = {}
        for kind in kinds:
            content = self._graded_text(kind, completion)
            details[f"{kind}/judged"] = 1.0 if content else 0.0
            if content:
                details[f"{kind}/addresses_judge"] = 1.0 if addresses_judge(content) else 0.0
                pending[kind] = self._judge(build_prompt(kind, query, reference, content), DIMENSIONS[kind])
            else:  # nothing to judge: the lowest score, without a request
                details[f"{kind}/overall"] = 0.0
                details[f"{kind}/skipped"] = "no <think> content" if kind == "think" else "empty answer"
                overall.append(0.0)
        judged = await asyncio.gather(*pending.values())  # "both": the two prompts in parallel
        for kind, (scores, error, cached) in zip(pending, judged, strict=True):
            if scores is None:
                details[f"{kind}/error"] = error
                overall.append(None)
                continue
            value = weighted_overall(scores, DIMENSIONS[kind])
            details.update({f"{kind}/{key}": score for key, score in scores.items()})
            details[f"{kind}/overall"] = value
            details[f"{kind}/cached"] = cached
            overall.append(value)
        if any(value is None for value in overall):
            return None, details
        return sum(overall) / len(overall) / 100.0, details  # type: ignore[arg-type]

    def _graded_text(self, kind: str, completion: str) -> str:
        """What prompt ``kind`` grades: the ``<think>`` content, or the answer (``extract``)."""
        return extract_think(completion) if kind == "think" else extract_answer(completion, self.extract)

    async def _judge(
        self, prompt: str, dimensions: Sequence[Dimension]
    ) -> tuple[dict[str, float] | None, str | None, bool]:
        """``(scores, error, cached)`` for one filled prompt: from the disk cache, else asked."""
        key = DiskCache.key(self.model, prompt)
        scores = self._cached_scores(key, dimensions)
        if scores is not None:
            return scores, None, True
        async with self._endpoint.slot():
            scores, error = await self._ask(prompt, dimensions)
            if scores is not None and self.cache is not None:
                self.cache.put(key, scores)
        return scores, error, False

    def _cached_scores(self, key: str, dimensions: Sequence[Dimension]) -> dict[str, float] | None:
        if self.cache is None:
            return None
        cached = self.cache.get(key)
        if cached is None:
            return None
        try:
            scores = parse_scores(json.dumps(cached), dimensions)
        except JudgeParseError:
            return None  # a stale or foreign entry: ask again
        self.stats["cache_hits"] += 1
        return scores

    async def _ask(
        self, prompt: str, dimensions: Sequence[Dimension]
    ) -> tuple[dict[str, float] | None, str | None]:
        """``(scores, error)`` from the judge, asked once more after an unparseable or out-of-range answer."""
        error: str | None = None
        for ask in range(2):
            try:
                content = await self._request(prompt, dimensions)
            except GiveUp as give_up:
                return None, str(give_up)
            try:
                return parse_scores(content, dimensions), None
            except JudgeParseError as parse_error:
                error = str(parse_error)
                if ask == 0:
                    self.stats["reasks"] += 1
        return None, error

    def _injection_frac(self, details: list[dict[str, Any] | None]) -> float:
        """The share of the graded texts (those sent to the judge) that address it; NaN when none was."""
        flags = [
            value
            for detail in details
            if detail is not None
            for key, value in detail.items()
            if key.endswith("/addresses_judge")
        ]
        if not flags:
            return math.nan
        share = sum(flags) / len(flags)
        if share and not self._warned_injection:
            self._warned_injection = True
            logger.warning(
                "llm_judge: %d of %d graded texts address the judge (reward/llm_judge/injection_frac): a policy "
                "that learns to write them is hacking its reward",
                int(sum(flags)),
                len(flags),
            )
        return share

    def _count_failures(self, results: list[tuple[float | None, dict[str, Any] | None]]) -> None:
        """Count the samples the judge was asked about but that scored ``None``, and log one example."""
        failures = sum(1 for score, detail in results if score is None and detail is not None)
        if failures:
            self.stats["failures"] += failures
            example = next(detail for score, detail in results if score is None and detail is not None)
            logger.warning("llm_judge: %d of %d samples unscored (e.g. %s)", failures, len(results), example)

    # -- one request: its body, its response format, its retries ---------------------------------

    def request_body(
        self, prompt: str, dimensions: Sequence[Dimension], output_format: str
    ) -> dict[str, Any]:
        """The chat-completion request for one filled prompt, asking for ``output_format`` (a
        :data:`STRUCTURED_OUTPUTS` value other than ``auto``)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if output_format == "json_schema":
            kind = "think" if tuple(dimensions) == THINK_DIMENSIONS else "response"
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": f"eapo_judge_{kind}",
                    "schema": score_schema(dimensions),
                    "strict": True,
                },
            }
        elif output_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    async def _output_format(self) -> str:
        """The format to send; with ``auto`` one probe, shared by every request waiting for it."""
        if self.output_format is not None:
            return self.output_format
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._probe_formats())
        return await asyncio.shield(self._probe)

    async def _request(self, prompt: str, dimensions: Sequence[Dimension]) -> str:
        """The judge's answer text, after transport retries; raises GiveUp or JudgeConfigError."""
        output_format = await self._output_format()
        try:
            return await self._endpoint.post(self.request_body(prompt, dimensions, output_format))
        except Refused as refusal:
            hint = ""
            if output_format != "plain" and self.structured_output != "auto":
                hint = f" (structured_output={output_format}: structured_output=auto falls back to a form it accepts)"
            raise GiveUp(f"{refusal}{hint}") from refusal

    async def _probe_formats(self) -> str:
        """``auto``: the first response format the server accepts, asked with a 4-token request each.

        A server refuses a form it lacks with HTTP 400/422 (vLLM, SGLang, OpenAI, DeepSeek do); the
        content of the answer does not matter. ``plain`` needs no probe. Transport failures propagate
        (GiveUp) and leave the format unknown, to be probed again with the next batch.
        """
        dimensions = THINK_DIMENSIONS if self.target != "response" else RESPONSE_DIMENSIONS
        refusals = []
        for output_format in ("json_schema", "json_object"):
            body = self.request_body(
                'Reply with a JSON object of scores, e.g. {"score": 50}.', dimensions, output_format
            )
            body["max_tokens"] = 4
            self.stats["probes"] += 1
            try:
                await self._endpoint.post(body)
            except Refused as refusal:
                refusals.append(f"{output_format}: {refusal}")
                continue
            self.output_format = output_format
            break
        else:
            self.output_format = "plain"
        logger.info(
            "llm_judge: %s accepts response_format %s%s",
            self.base_url,
            self.output_format,
            f" (refused {'; '.join(refusals)})" if refusals else "",
        )
        return self.output_format

    # -- closing, reachability -------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client and stop the background loop (the judge can be used again afterwards)."""
        if self._endpoint.close():
            self._probe = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def check_reachable(self) -> list[str]:
        """One cheap request (``GET {base_url}/models``); returns the served model names.

        Raises:
            JudgeConfigError: the key's environment variable is unset, or the key is rejected.
            JudgeUnreachableError: the endpoint does not answer (naming ``base_url``).
        """
        served = self._endpoint.loop().run(self._endpoint.served_models())
        if served and self.model not in served:
            logger.warning(
                "llm_judge: %s does not list model %r (it serves %s)", self.base_url, self.model, served[:10]
            )
        return served

    def __repr__(self) -> str:
        return (
            f"LLMJudge(base_url={self.base_url!r}, model={self.model!r}, target={self.target!r}, "
            f"concurrency={self.concurrency}, timeout={self.timeout}, max_retries={self.max_retries})"
        )


def _checked_settings(
    *,
    base_url: str | None,
    model: str | None,
    target: str,
    concurrency: int,
    timeout: float,
    max_retries: int,
    backoff_base: float,
    backoff_max: float,
    structured_output: str,
    extract: str,
    http_backend: str,
    api_key_env: str | None,
) -> None:
    """Validate :class:`LLMJudge`'s settings, naming the first wrong one."""
    if not base_url:
        raise ValueError(
            "llm_judge needs base_url=, an OpenAI-compatible endpoint such as http://localhost:8000/v1 "
            "(vLLM/SGLang) or https://api.deepseek.com/v1"
        )
    if not model:
        raise ValueError("llm_judge needs model=, the judge model served at base_url (e.g. 'deepseek-chat')")
    if target not in TARGETS:
        raise ValueError(f"llm_judge: unknown target {target!r}; known: {', '.join(TARGETS)}")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"llm_judge: concurrency must be an integer >= 1, got {concurrency!r}")
    if not timeout > 0:
        raise ValueError(f"llm_judge: timeout must be > 0 seconds, got {timeout!r}")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"llm_judge: max_retries must be an integer >= 0, got {max_retries!r}")
    if not (backoff_base >= 0 and backoff_max >= 0):
        raise ValueError(
            f"llm_judge: backoff_base and backoff_max must be >= 0, got {backoff_base}, {backoff_max}"
        )
    if structured_output not in STRUCTURED_OUTPUTS:
        raise ValueError(
            f"llm_judge: structured_output must be one of {', '.join(STRUCTURED_OUTPUTS)}, got "
            f"{structured_output!r}"
        )
    extract_answer("", extract)  # validates the answer mode
    if http_backend not in ("auto", "aiohttp", "httpx"):
        raise ValueError(
            f"llm_judge: http_backend must be 'auto', 'aiohttp' or 'httpx', got {http_backend!r}"
        )
    if api_key_env is not None and not (isinstance(api_key_env, str) and api_key_env.strip()):
        raise ValueError("llm_judge: api_key_env must name an environment variable (or be None for no key)")
