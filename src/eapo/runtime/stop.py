"""Stop strings (``rollout.stop``): where a completion ends, and why, the same on every rollout backend.

A completion ends at the first stop string it writes, which stays in it (vLLM's
``include_stop_str_in_output``). Backends differ in how they stop: vLLM checks each new token's text and
stops itself, ``model.generate`` stops through :func:`eapo.runtime.generate.stop_criteria`, continuous batching
(``paged``) cannot stop at a string and generates on to EOS or the cap. Each backend's raw tokens are
therefore cut here, by one rule, so that all of them return the same completion for the same tokens:

* **Tokens.** The completion keeps its tokens up to and including the first token after which the
  decoded text contains a stop string (:func:`stop_token_count`). A token that *straddles* the stop
  string (``"</advice>\\n"`` as one token, say, or ``">\\n"`` closing it) is kept whole: the policy
  sampled it, so it is trained and counted in the completion's length, as vLLM keeps it.
* **Text.** The completion's text ends with the stop string: whatever the straddling token wrote past
  it is dropped from the text (:func:`cut_text`), as vLLM's detokeniser drops it. The rewards, the
  evaluation and ``rollouts.jsonl`` see this text.

When two stop strings occur, the one that ends first in the text wins (vLLM checks each token as it
comes, so the earliest end is where it stops); at an equal end the longer match wins.

Why a completion ended (:data:`STOP_REASONS`): ``string`` (a stop string), ``eos`` (an end-of-sequence
token) or ``cap`` (the length cap, ``rollout.max_completion_tokens``). Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

__all__ = [
    "STOP_REASONS",
    "check_stops",
    "first_stop",
    "cut_text",
    "stop_token_count",
    "stop_reason",
    "end_completion",
    "stop_reason_of",
    "stop_reason_metrics",
    "STOP_REASON_METRICS",
]

#: Why a completion ended: a stop string, an end-of-sequence token, or the length cap.
STOP_REASONS = ("string", "eos", "cap")
#: One metric per stop reason, in :data:`STOP_REASONS`' order: the share of a step's rollouts it ended.
STOP_REASON_METRICS = {reason: f"completions/stopped_by_{reason}" for reason in STOP_REASONS}


def check_stops(stops: Any, *, where: str = "rollout.stop") -> tuple[str, ...]:
    """``stops`` as a tuple of non-empty strings (``None`` -> ``()``); a ValueError naming ``where`` otherwise."""
    if stops is None:
        return ()
    if isinstance(stops, str) or not isinstance(stops, Sequence):
        raise ValueError(
            f"{where} must be a list of strings, e.g. ['</advice>'], got {stops!r} (a single string: wrap it in a list)"
        )
    bad = [stop for stop in stops if not isinstance(stop, str) or not stop]
    if bad:
        raise ValueError(f"{where} must hold non-empty strings, got {bad!r} in {list(stops)!r}")
    return tuple(stops)


def first_stop(text: str, stops: Sequence[str]) -> tuple[int, str] | None:
    """``(end, stop)``: where the first stop string in ``text`` ends (a character offset) and which it is;
    ``None`` when ``text`` holds none. The earliest end wins; at an equal end, the longer string."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop)
        if at == -1:
            continue
        end = at + len(stop)
        if best is None or end < best[0] or (end == best[0] and len(stop) > len(best[1])):
            best = (end, stop)
    return best


def cut_text(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to and including its first stop string, and whether it held one (else unchanged)."""
    found = first_stop(text, stops) if stops else None
    if found is None:
        return text, False
    return text[: found[0]], True


def stop_token_count(
    token_ids: Sequence[int], decode: Callable[[Sequence[int]], str], stops: Sequence[str]
) -> int | None:
    """How many of ``token_ids`` the completion keeps: up to and including the first token after which
    ``decode(token_ids[:k])`` contains a stop string. ``None`` when the whole sequence holds none.

    A binary search over prefixes: the prefix text grows with ``k`` (a byte-level tokenizer may leave an
    incomplete character at a prefix's end, which never completes a stop string early), so the first
    prefix that holds a stop string is found with about log2(len) decodes."""
    if not stops or not token_ids:
        return None
    if first_stop(decode(token_ids), stops) is None:
        return None
    low, high = 1, len(token_ids)  # the answer lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if first_stop(decode(token_ids[:middle]), stops) is not None:
            high = middle
        else:
            low = middle + 1
    return low


def stop_reason(*, stopped_by_string: bool, ended_with_eos: bool) -> str:
    """One of :data:`STOP_REASONS`: a stop string first (it ended the text, whatever token carried it),
    then an end-of-sequence token, else the cap."""
    if stopped_by_string:
        return "string"
    return "eos" if ended_with_eos else "cap"


def end_completion(
    token_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    stops: Sequence[str],
    eos_ids: Collection[int],
) -> tuple[list[int], str, str]:
    """One generated row as a completion: ``(tokens, text, reason)``.

    ``token_ids`` are a row as a backend returned it, ending at its first end-of-sequence token or at the
    cap (a backend that cannot stop at a string may have written on past one). The tokens are cut after
    the one that completes the first stop string (:func:`stop_token_count`; the EOS, if any, goes with
    what follows); ``text`` is the decoded tokens (EOS not included) cut at the stop string's end
    (:func:`cut_text`); ``reason`` is one of :data:`STOP_REASONS`."""
    ids = list(token_ids)
    ended = bool(ids) and ids[-1] in eos_ids
    body = ids[:-1] if ended else ids
    kept = stop_token_count(body, decode, stops)
    if kept is not None:
        return body[:kept], cut_text(decode(body[:kept]), stops)[0], "string"
    return ids, decode(body), "eos" if ended else "cap"


def stop_reason_of(
    text: str, response_ids: Sequence[int], stops: Sequence[str], eos_ids: Collection[int]
) -> str:
    """Why a rollout ended (:data:`STOP_REASONS`): its decoded ``text`` holds a stop
    string, else its last token is an end-of-sequence id, else it ran to the cap."""
    return stop_reason(
        stopped_by_string=bool(stops) and first_stop(text, stops) is not None,
        ended_with_eos=bool(response_ids) and int(response_ids[-1]) in eos_ids,
    )


def stop_reason_metrics(reasons: Sequence[str]) -> dict[str, float]:
    """The share of the rollouts each reason ended (:data:`STOP_REASON_METRICS`; they sum to 1). An empty
    step has none."""
    if not reasons:
        return {}
    unknown = sorted(set(reasons) - set(STOP_REASONS))
    if unknown:
        raise ValueError(f"unknown stop reasons {unknown}; known: {list(STOP_REASONS)}")
    return {
        key: sum(reason == name for reason in reasons) / len(reasons)
        for name, key in STOP_REASON_METRICS.items()
    }
