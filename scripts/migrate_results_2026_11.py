"""One-off migration, run once (issue 48 item 6): the committed result files written before eapo recorded
why a generation ended get the fields today's writers put there, so the readers need no fallback.

    python scripts/migrate_results_2026_11.py [STUDY_DIR ...]   # default: the two studies below

These runs sampled without stop strings, so what today's code would have written is known exactly:

* ``eval/samples.jsonl`` (and ``base/samples.jsonl``): ``"stop_reason"`` after ``"finished"`` (the
  harness's ``_sample``): ``"eos"`` where ``finished``, else ``"cap"`` (every generator's
  ``finished = reason != "cap"``; ``"string"`` needs a stop string).
* ``eval_config.json``: ``generation.stop = []`` after ``seed`` (``generation_fingerprint``).
* ``eval/results.json`` (and ``base/results.json``): ``answers`` after ``extra`` and ``settings.stop = []``
  after ``settings.n_resamples`` (the harness's ``_results``; ``settings`` is ``SamplingSettings``' fields,
  ``stop`` its last, then the runner's details). ``answers`` is
  ``eapo.evaluation.answer_shape_of_samples`` of the evaluation's current samples (``per_prompt.ids`` in
  order, each id's ``k`` samples by index: the order ``_results`` sums in) at the closing tag the format
  scorer's label names (``close_tag_of_label``; ``</advice>`` here), from the migrated ``samples.jsonl``.
  Needs ``eapo`` importable (``PYTHONPATH=src``).
* ``metrics.jsonl``: ``completions/stopped_by_{string,eos,cap}`` after TRL's
  ``completions/max_terminated_length`` (the TRL trainer's ``_generate`` logs them after TRL's own):
  0, 1 - clipped_ratio, clipped_ratio. TRL's ``clipped_ratio`` counts a rollout whose last token is
  neither an EOS nor the pad token; eapo's ``stopped_by_cap`` one whose last token is no EOS: the same
  for SmolLM2 here, whose pad token is its EOS token. A step that reused the previous generation carries
  that step's values, as its ``clipped_ratio`` is carried.

Each file is rewritten with its writer's ``json.dumps`` options, key order kept; a line that does not
come back byte for byte from ``json.loads`` is refused. A file that has the fields is left alone
(running it again changes nothing).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ("docs/results/study-cpu-controls", "docs/results/study-cpu-smollm2-medquad-3seeds")
#: Where the TRL trainer's stop-reason shares sit: right after TRL's ``_generate`` metrics.
AFTER = "completions/max_terminated_length"
STOPPED = ("completions/stopped_by_string", "completions/stopped_by_eos", "completions/stopped_by_cap")


def _inserted(row: dict, after: str, new: dict) -> dict:
    """``row`` with ``new``'s items right after the key ``after``."""
    if after not in row:
        raise ValueError(f"no {after!r} to insert {list(new)} after")
    out = {}
    for key, value in row.items():
        out[key] = value
        if key == after:
            out.update(new)
    return out


def _lines(path: Path, dumps) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.split("\n")[:-1]]  # not splitlines: U+2028 is in a string
    if "".join(dumps(row) + "\n" for row in rows) != text:
        raise ValueError(f"{path}: does not round-trip through json.loads/dumps byte for byte; not migrated")
    return rows


def samples(path: Path) -> bool:
    dumps = lambda row: json.dumps(row, ensure_ascii=False)  # noqa: E731 (harness._write_samples)
    rows = _lines(path, dumps)
    if all("stop_reason" in row for row in rows):
        return False
    rows = [_inserted(row, "finished", {"stop_reason": "eos" if row["finished"] else "cap"}) for row in rows]
    path.write_text("".join(dumps(row) + "\n" for row in rows), encoding="utf-8")
    return True


def eval_config(path: Path) -> bool:
    dumps = lambda config: json.dumps(config, indent=2, ensure_ascii=False) + "\n"  # noqa: E731
    text = path.read_text(encoding="utf-8")
    config = json.loads(text)
    if dumps(config) != text:
        raise ValueError(f"{path}: does not round-trip through json.loads/dumps byte for byte; not migrated")
    if "stop" in config["generation"]:
        return False
    config["generation"] = _inserted(config["generation"], "seed", {"stop": []})
    path.write_text(dumps(config), encoding="utf-8")
    return True


def metrics(path: Path) -> bool:
    rows = _lines(path, json.dumps)  # eapo.engines.trl.callbacks.MetricsCallback
    if all(STOPPED[2] in row for row in rows):
        return False
    migrated = []
    for row in rows:
        clipped = row["completions/clipped_ratio"]
        if not (isinstance(clipped, float) and (clipped * 1024).is_integer()):
            # a share of a few rollouts: 1 - it is then exactly the float32 share the trainer would log
            raise ValueError(
                f"{path}: step {row['step']}: clipped_ratio {clipped!r} is no multiple of 1/1024"
            )
        shares = dict(zip(STOPPED, (0.0, 1.0 - clipped, clipped), strict=True))
        migrated.append(_inserted(row, AFTER, shares))
    path.write_text("".join(json.dumps(row) + "\n" for row in migrated), encoding="utf-8")
    return True


def answers_of(path: Path, results: dict) -> dict:
    """``results.json["answers"]`` as the harness's ``_results`` computes it, from the evaluation's samples."""
    from eapo.evaluation.answers import answer_shape_of_samples, close_tag_of_label
    from eapo.evaluation.metrics import strict_gate

    by_key = {}
    for sample in _lines(path.parent / results["samples"], lambda row: json.dumps(row, ensure_ascii=False)):
        if "stop_reason" not in sample:
            raise ValueError(f"{path.parent / results['samples']}: migrate samples.jsonl first")
        by_key[(str(sample["id"]), int(sample["sample"]))] = sample
    current = [
        by_key[(record_id, index)]
        for record_id in results["per_prompt"]["ids"]
        for index in range(results["k"])
    ]
    if len(current) != results["n_samples"]:
        raise ValueError(f"{path}: {len(current)} current samples, but n_samples = {results['n_samples']}")
    close_tag = close_tag_of_label(results["labels"].get(strict_gate() or ""))
    return answer_shape_of_samples(current, close_tag=close_tag)


def results_json(path: Path) -> bool:
    dumps = lambda results: json.dumps(results, indent=2, ensure_ascii=False) + "\n"  # noqa: E731 (harness.evaluate)
    text = path.read_text(encoding="utf-8")
    results = json.loads(text)
    if dumps(results) != text:
        raise ValueError(f"{path}: does not round-trip through json.loads/dumps byte for byte; not migrated")
    if "answers" in results and "stop" in results["settings"]:
        return False
    if "answers" not in results:
        results = _inserted(results, "extra", {"answers": answers_of(path, results)})
    if "stop" not in results["settings"]:
        results["settings"] = _inserted(results["settings"], "n_resamples", {"stop": []})
    path.write_text(dumps(results), encoding="utf-8")
    return True


def main(studies: list[str]) -> None:
    for study in studies:
        root = ROOT / study
        for name, migrate in (
            ("samples.jsonl", samples),
            ("eval_config.json", eval_config),
            ("metrics.jsonl", metrics),
            ("results.json", results_json),  # after samples.jsonl: its answers are read from them
        ):
            paths = sorted(root.rglob(name))
            changed = sum(migrate(path) for path in paths)
            print(f"{study}: {name}: {changed} of {len(paths)} migrated")


if __name__ == "__main__":
    main(sys.argv[1:] or list(STUDIES))
