"""The resumable evaluation loop: sample ``k`` responses per prompt, score them, aggregate, write.

Files in the output directory::

    eval_config.json   what the samples were generated with (model, k, temperature, top_p,
                       max_new_tokens, seed, stop) and which scorer (label) produced each score column
    samples.jsonl      one line per sample: id, sample, prompt, reference, completion, num_tokens,
                       finished, stop_reason (string, eos or cap: eapo.runtime.stop), scores{...};
                       appended, flushed and fsynced one prompt at a time
    results.json       {"metrics", "ci95", "k", "n_prompts", "model", "data", "avg_of", "labels",
                       "extract", "n_scored", "n_samples", "unscored", "extra", "answers",
                       "settings", ...}
    results.csv        the same numbers as one CSV row
    results.md         the paper-layout Markdown tables

In ``results.json``: ``avg_of`` maps each Avg to its columns (``avg_strict_of`` the strict Avg's;
``strict_gate`` names the scorer whose check gates the strict columns, ``format``, or null when it did
not run: see :mod:`eapo.evaluation.metrics`); ``extract`` names the part of the
response each scorer read (``advice`` / ``whole``); ``unscored`` counts, per scorer, the samples it
could not score (``None`` or NaN, e.g. a judge call that failed after its retries), out of
``n_samples``; ``n_scored`` counts, per column, the prompts with at least one scored sample; ``per_prompt`` holds each
column's per-prompt value (``ids`` in order; null: no scored sample) — what a bootstrap over prompts
across evaluations needs (``eapo study``'s tuning-free claim) without the samples. ``answers`` is the
shape of all current samples (:mod:`eapo.evaluation.answers`: cut at the cap, text after the format
reward's closing tag, distinct 4-grams), the trailing-text exploit that no score sees.

Resuming: a prompt whose ``k`` samples are all in ``samples.jsonl`` (keyed by record id and sample
index, with the same prompt text) is not generated again. A torn last line or a prompt with fewer
than ``k`` samples (a crash mid-write) is dropped and regenerated. A score column that is missing,
``None`` (e.g. a judge timeout) or was produced by a scorer with a different label (e.g. the
bi-encoder stand-in where the cross-encoder is now available) is recomputed from the stored text.
Samples generated with a different model, k, temperature, top_p, max_new_tokens, seed or stop strings are never
mixed in: :class:`EvalMismatchError` says which field differs.

:func:`evaluate` reads in its phases: reuse the stored samples (:func:`_reuse_stored_samples`), generate
and score what is left (:func:`_generate_and_score`), aggregate (:func:`_results`), write.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eapo.evaluation.answers import answer_shape_of_samples, close_tag_of_scorers, cut_at_cap
from eapo.evaluation.metrics import (
    aggregate,
    avg_columns,
    bootstrap_ci,
    metric_keys,
    per_prompt_values,
    scorer_columns,
    strict_avg_columns,
    strict_gate,
    unscored_counts,
)
from eapo.evaluation.report import results_csv, results_markdown
from eapo.run_dir import atomic_write_text
from eapo.runtime.generate import Completion, Generator
from eapo.runtime.stop import check_stops

logger = logging.getLogger(__name__)

__all__ = [
    "SamplingSettings",
    "EvalMismatchError",
    "evaluate",
    "load_samples",
    "check_generation",
    "generation_fingerprint",
    "RESULTS_FILE",
    "RESULTS_CSV",
    "RESULTS_MD",
    "SAMPLES_FILE",
    "EVAL_CONFIG_FILE",
]

RESULTS_FILE = "results.json"
RESULTS_CSV = "results.csv"
RESULTS_MD = "results.md"
SAMPLES_FILE = "samples.jsonl"
EVAL_CONFIG_FILE = "eval_config.json"

#: Fields that must match for stored samples to be reused.
GENERATION_FIELDS = ("model", "k", "temperature", "top_p", "max_new_tokens", "seed", "stop")
#: The fields of every ``samples.jsonl`` line, in the order :func:`_sample` writes them.
SAMPLE_FIELDS = (
    "id",
    "sample",
    "prompt",
    "reference",
    "completion",
    "num_tokens",
    "finished",
    "stop_reason",
    "scores",
)


class EvalMismatchError(ValueError):
    """Stored samples were generated with different settings; the message names the field."""


@dataclass
class SamplingSettings:
    """How samples are drawn and intervals computed, once every value is resolved (what the loop reads;
    :class:`eapo.evaluation.settings.EvalSettings` is what an evaluation is asked to do)."""

    k: int = 8
    """Samples per prompt (the paper's RL@8 / RR@8 use 8)."""
    temperature: float = 1.0
    """Sampling temperature (0: greedy, then all k samples coincide)."""
    top_p: float = 1.0
    """Nucleus sampling."""
    max_new_tokens: int = 512
    """Maximum response length in tokens."""
    seed: int = 0
    """Seeds sampling (per batch, derived with the first record id) and the bootstrap."""
    batch_size: int = 8
    """Prompts per generation call (each yields k sequences)."""
    n_resamples: int = 1000
    """Bootstrap replicates for the 95% intervals."""
    stop: tuple[str, ...] = ()
    """Stop strings: each sample ends at the first one it writes (:mod:`eapo.runtime.stop`)."""

    def validate(self) -> SamplingSettings:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.n_resamples < 1:
            raise ValueError(f"n_resamples must be >= 1, got {self.n_resamples}")
        self.stop = check_stops(self.stop, where="stop")
        return self


def _batch_seed(seed: int, record_id: str) -> int:
    digest = hashlib.sha256(f"{seed}:{record_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def load_samples(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """Parse ``samples.jsonl``: ``(samples, torn)``; a torn last line is dropped (``torn=True``). A sample
    without one of the fields every ``eapo eval`` writes (:data:`SAMPLE_FIELDS`) is a ValueError naming the
    file and line."""
    if not path.exists():
        return [], False
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    samples = []
    torn = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            sample = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                torn = True  # a kill mid-write
                break
            raise ValueError(
                f"{path}:{number}: not valid JSON ({error}); delete the line or the file"
            ) from error
        missing = [key for key in SAMPLE_FIELDS if key not in sample]
        if missing:
            raise ValueError(
                f"{path}:{number}: sample lacks {missing} (eapo eval writes {list(SAMPLE_FIELDS)}: written by "
                "an older eapo eval, or not by eapo eval); delete that directory or use another --output-dir "
                "to start afresh"
            )
        samples.append(sample)
    return samples, torn


def _write_samples(path: Path, samples: Sequence[Mapping[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples))


def check_generation(config_path: Path, current: Mapping[str, Any]) -> dict[str, Any]:
    """The stored eval config (or {}); raise :class:`EvalMismatchError` if a generation field differs, and
    ValueError if one is missing (an ``eval_config.json`` written before the field existed)."""
    if not config_path.exists():
        return {}
    try:
        stored = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{config_path}: not valid JSON ({error}); delete it and samples.jsonl to start afresh"
        ) from error
    generation = stored.get("generation", {})
    missing = [field for field in GENERATION_FIELDS if field not in generation]
    if missing:
        raise ValueError(
            f"{config_path}: the generation settings lack {missing} (written by an older eapo eval, before "
            "they were recorded); delete that directory or use another --output-dir to start afresh"
        )
    for field in GENERATION_FIELDS:
        was = generation[field]
        if was != current[field]:
            raise EvalMismatchError(
                f"{config_path.parent}: the stored samples were generated with {field}="
                f"{was!r}, but this evaluation asks for {field}={current[field]!r}; "
                f"rerun with {field}={was!r} to resume, or use another "
                "--output-dir (or delete that directory) to start afresh"
            )
    return stored


def generation_fingerprint(model: str, settings: SamplingSettings) -> dict[str, Any]:
    """The fields of :data:`GENERATION_FIELDS` for ``eval_config.json``."""
    return {
        "model": model,
        "k": settings.k,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_new_tokens": settings.max_new_tokens,
        "seed": settings.seed,
        "stop": list(settings.stop),
    }


def _score(
    scorers: Mapping[str, Any],
    names: Sequence[str],
    samples: Sequence[dict[str, Any]],
    questions: Sequence[str],
) -> None:
    """Fill ``sample["scores"][name]`` for ``names`` in place (one batched call per scorer)."""
    if not samples:
        return
    completions = [s["completion"] for s in samples]
    references = [s["reference"] for s in samples]
    # every component takes **kwargs: the lengths in tokens are what a length penalty (overlong) reads,
    # the questions what the judge asks about
    kwargs: dict[str, Any] = {
        "completion_lengths": [s["num_tokens"] for s in samples],
        "questions": list(questions),
    }
    for name in names:
        scorer = scorers[name]
        values = scorer(list(questions), completions, references, **kwargs)
        if len(values) != len(samples):
            raise RuntimeError(f"scorer {name!r} returned {len(values)} scores for {len(samples)} samples")
        for sample, value in zip(samples, values, strict=True):
            sample["scores"][name] = None if value is None or not math.isfinite(value) else float(value)


def evaluate(
    records: Sequence[Any],
    prompts: Sequence[str],
    scorers: Mapping[str, Any],
    output_dir: str | os.PathLike,
    *,
    model: str,
    data: str,
    generator: Generator | Callable[[], Generator],
    settings: SamplingSettings | None = None,
    display_name: str | None = None,
    details: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Generate, score and aggregate; resume from ``output_dir`` when it holds earlier samples.

    Args:
        records: :class:`eapo.data.Record` s (``id``, ``question``, ``reference``); ids must be unique.
        prompts: the rendered prompt text of each record (chat template applied).
        scorers: ``{scorer name: reward function}``; those whose registration declares table columns
            (:func:`eapo.evaluation.metrics.scorer_columns`) fill them, the others (``format``) are
            reported under ``extra``.
        output_dir: where the files of the module docstring go (created).
        model: what was evaluated (recorded, and compared on resume).
        data: the dataset description recorded in ``results.json`` (e.g. ``"rjua:dev"``).
        generator: a :class:`Generator`, or a zero-argument factory called only if something is
            left to generate (a finished evaluation never loads the model).
        settings: :class:`SamplingSettings`.
        display_name: the row label of the Markdown table (default ``model``).
        details: extra settings recorded under ``results.json["settings"]`` (split, backend, ...).
        progress: show a progress bar over prompts.

    Returns:
        The ``results.json`` dict.
    """
    settings = (settings or SamplingSettings()).validate()
    ids = _record_ids(records, prompts)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    samples_path = output_dir / SAMPLES_FILE
    config_path = output_dir / EVAL_CONFIG_FILE

    generation = generation_fingerprint(model, settings)
    stored = check_generation(config_path, generation)
    finished = _reuse_stored_samples(
        samples_path, config_path, generation, stored, records, prompts, scorers, settings.k
    )
    pending = [index for index, record_id in enumerate(ids) if record_id not in finished]
    logger.info(
        "%d of %d prompts reused from %s; %d to generate",
        len(ids) - len(pending),
        len(ids),
        samples_path,
        len(pending),
    )
    if pending:
        active = generator() if callable(generator) and not hasattr(generator, "generate") else generator
        finished.update(
            _generate_and_score(active, pending, records, prompts, scorers, samples_path, settings, progress)
        )
    results = _results(
        [finished[record_id] for record_id in ids],
        ids,
        scorers,
        settings,
        model=model,
        data=data,
        display_name=display_name,
        details=details,
    )
    atomic_write_text(output_dir / RESULTS_FILE, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(output_dir / RESULTS_CSV, results_csv(results))
    atomic_write_text(output_dir / RESULTS_MD, results_markdown(results))
    return results


def _record_ids(records: Sequence[Any], prompts: Sequence[str]) -> list[str]:
    """The records' ids as strings; ValueError when they repeat or there is not one prompt per record."""
    if len(records) != len(prompts):
        raise ValueError(f"got {len(records)} records but {len(prompts)} prompts; pass one prompt per record")
    ids = [str(record.id) for record in records]
    seen: set[str] = set()
    for record_id in ids:
        if record_id in seen:
            raise ValueError(f"record id {record_id!r} occurs twice; evaluation keys samples by record id")
        seen.add(record_id)
    return ids


# --- phase 1: reuse what an earlier run finished -------------------------------------------------


def _reuse_stored_samples(
    samples_path: Path,
    config_path: Path,
    generation: Mapping[str, Any],
    stored: Mapping[str, Any],
    records: Sequence[Any],
    prompts: Sequence[str],
    scorers: Mapping[str, Any],
    k: int,
) -> dict[str, list[dict[str, Any]]]:
    """``{record id: its k samples}`` of the current records that ``samples.jsonl`` holds whole, their stale
    score columns recomputed; ``samples.jsonl`` is rewritten without unfinished prompts and with the new
    scores, and ``eval_config.json`` records the generation settings and every scorer's label."""
    ids = [str(record.id) for record in records]
    kept, finished, rewrite = _complete_prompts(samples_path, dict(zip(ids, prompts, strict=True)), k)
    reused = [s for record_id in ids if record_id in finished for s in finished[record_id]]
    question_of = {str(record.id): record.question for record in records}
    labels: dict[str, str] = dict(stored.get("scorers", {}))
    if _rescore_stale(reused, scorers, labels, question_of):
        rewrite = True
    if rewrite:
        _write_samples(samples_path, kept)
    atomic_write_text(
        config_path,
        json.dumps({"generation": dict(generation), "scorers": labels}, indent=2, ensure_ascii=False) + "\n",
    )
    return finished


def _complete_prompts(
    samples_path: Path, prompt_of: Mapping[str, str], k: int
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], bool]:
    """``(kept, finished, rewrite)`` from ``samples.jsonl``: ``kept`` every prompt's samples whose k are all
    there (in file order; what the file is rewritten to), ``finished`` those of the records in
    ``prompt_of`` (id -> its current prompt text), ``rewrite`` whether the file holds anything else (a
    torn line, a prompt cut short by a crash, a repeated sample)."""
    samples, torn = load_samples(samples_path)
    by_id: dict[str, dict[int, dict[str, Any]]] = {}
    for sample in samples:
        by_id.setdefault(str(sample["id"]), {})[int(sample["sample"])] = sample
    kept: list[dict[str, Any]] = []
    finished: dict[str, list[dict[str, Any]]] = {}
    dropped = 0
    for record_id, group in by_id.items():
        if sorted(group) != list(range(k)):
            dropped += len(group)  # a prompt cut short by a crash: regenerate it whole
            continue
        ordered = [group[index] for index in range(k)]
        if record_id in prompt_of:
            if ordered[0]["prompt"] != prompt_of[record_id]:
                raise EvalMismatchError(
                    f"{samples_path}: record {record_id!r} was sampled from a different prompt text than now "
                    "(was the prompt template, max_prompt_tokens, data.response_prefix, the tokenizer or the data "
                    "changed?); use another --output-dir or delete that directory"
                )
            finished[record_id] = ordered
        kept.extend(ordered)
    if torn or dropped:
        logger.warning(
            "%s: dropped a torn line / %d samples of unfinished prompts; they are regenerated",
            samples_path,
            dropped,
        )
    return kept, finished, torn or dropped > 0 or len(kept) != len(samples)


def _rescore_stale(
    samples: Sequence[dict[str, Any]],
    scorers: Mapping[str, Any],
    labels: dict[str, str],
    question_of: Mapping[str, str],
) -> bool:
    """Rescore ``samples`` whose column is missing, None, or was produced by a scorer whose label is not the
    current one (``labels``: column -> the stored label, updated in place); True if any was rescored."""
    rescored = False
    for name, scorer in scorers.items():
        stale = labels.get(name) != scorer.label
        todo = [s for s in samples if stale or s["scores"].get(name) is None]
        if todo:
            logger.info("rescoring %d stored samples with %s", len(todo), scorer.label)
            _score(scorers, [name], todo, [question_of[str(s["id"])] for s in todo])
            rescored = True
        labels[name] = scorer.label
    return rescored


# --- phase 2: generate and score what is left ----------------------------------------------------


def _generate_and_score(
    generator: Generator,
    pending: Sequence[int],
    records: Sequence[Any],
    prompts: Sequence[str],
    scorers: Mapping[str, Any],
    samples_path: Path,
    settings: SamplingSettings,
    progress: bool,
) -> dict[str, list[dict[str, Any]]]:
    """Sample, score and append (flushed and fsynced one prompt at a time) the records at the indices
    ``pending``, ``settings.batch_size`` prompts per generation call: ``{record id: its k samples}``."""
    k = settings.k
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pending), desc="eapo eval", unit="prompt", dynamic_ncols=True)
    finished: dict[str, list[dict[str, Any]]] = {}
    with open(samples_path, "a", encoding="utf-8") as out:
        for start in range(0, len(pending), settings.batch_size):
            batch = pending[start : start + settings.batch_size]
            groups: list[list[Completion]] = generator.generate(
                [prompts[i] for i in batch],
                k=k,
                temperature=settings.temperature,
                top_p=settings.top_p,
                max_new_tokens=settings.max_new_tokens,
                seed=_batch_seed(settings.seed, str(records[batch[0]].id)),
                stop=settings.stop,
            )
            if len(groups) != len(batch) or any(len(group) != k for group in groups):
                raise RuntimeError(
                    f"the generator returned {[len(g) for g in groups]} samples for {len(batch)} prompts × k={k}"
                )
            new = [
                _sample(records[index], prompts[index], sample_index, completion)
                for index, group in zip(batch, groups, strict=True)
                for sample_index, completion in enumerate(group)
            ]
            _score(scorers, list(scorers), new, [records[i].question for i in batch for _ in range(k)])
            for position, index in enumerate(batch):
                group_samples = new[position * k : (position + 1) * k]
                out.write("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in group_samples))
                out.flush()
                os.fsync(out.fileno())
                finished[str(records[index].id)] = group_samples
            if bar is not None:
                bar.update(len(batch))
    if bar is not None:
        bar.close()
    return finished


def _sample(record: Any, prompt: str, sample_index: int, completion: Completion) -> dict[str, Any]:
    """One line of ``samples.jsonl`` (not scored yet)."""
    return {
        "id": str(record.id),
        "sample": sample_index,
        "prompt": prompt,
        "reference": record.reference,
        "completion": completion.text,
        "num_tokens": completion.num_tokens,
        "finished": completion.finished,
        "stop_reason": completion.stop_reason,
        "scores": {},
    }


# --- phase 3: aggregate over the current records -------------------------------------------------


def _results(
    groups: Sequence[Sequence[Mapping[str, Any]]],
    ids: Sequence[str],
    scorers: Mapping[str, Any],
    settings: SamplingSettings,
    *,
    model: str,
    data: str,
    display_name: str | None,
    details: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The ``results.json`` dict from each current record's ``k`` scored samples (``groups``, in ``ids`` order)."""
    per_prompt_scores = [
        {name: [s["scores"].get(name) for s in group] for name in scorers} for group in groups
    ]
    table = per_prompt_values(per_prompt_scores)
    metrics = aggregate(table)
    ci95 = bootstrap_ci(table, n_resamples=settings.n_resamples, confidence=0.95, seed=settings.seed)
    all_samples = [s for group in groups for s in group]
    n_scored = {column: int((~np.isnan(values)).sum()) for column, values in table.items()}
    keys = metric_keys()
    gate = strict_gate()
    return {
        "metrics": {key: metrics[key] for key in keys},
        "ci95": {key: (list(ci95[key]) if ci95[key] is not None else None) for key in keys},
        "k": settings.k,
        "n_prompts": len(ids),
        "model": model,
        "data": data,
        "display_name": display_name or model,
        "avg_of": {key: list(columns) for key, columns in avg_columns().items()},
        "avg_strict_of": {key: list(columns) for key, columns in strict_avg_columns().items()},
        "strict_gate": gate if gate in scorers else None,
        "labels": {name: scorer.label for name, scorer in scorers.items()},
        "extract": {
            name: scorer.extract
            for name, scorer in scorers.items()
            if isinstance(getattr(scorer, "extract", None), str)
        },
        "n_scored": n_scored,
        "per_prompt": {
            "ids": list(ids),
            "columns": {
                column: [None if math.isnan(v) else float(v) for v in values]
                for column, values in table.items()
            },
        },
        "n_samples": len(all_samples),
        "unscored": unscored_counts(per_prompt_scores),
        "extra": _extra_means(all_samples, scorers),
        "answers": answer_shape_of_samples(all_samples, close_tag=close_tag_of_scorers(scorers)),
        "settings": {**asdict(settings), **dict(details or {})},
        "samples": SAMPLES_FILE,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def _extra_means(samples: Sequence[Mapping[str, Any]], scorers: Mapping[str, Any]) -> dict[str, float | None]:
    """``results.json["extra"]``: the mean of each scorer that fills no table column (``format``), the
    mean completion length in tokens and the fraction of completions cut at the length cap."""
    extra: dict[str, float | None] = {}
    in_table = scorer_columns()
    for name in scorers:
        if name in in_table:
            continue
        values = [s["scores"].get(name) for s in samples if s["scores"].get(name) is not None]
        extra[name] = sum(values) / len(values) if values else None
    if samples:
        extra["completion_tokens"] = sum(s["num_tokens"] for s in samples) / len(samples)
        extra["truncated_frac"] = sum(cut_at_cap(s) for s in samples) / len(samples)
    return extra
