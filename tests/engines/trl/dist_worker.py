"""One process of a multi-process ``eapo train``, launched by tests/engines/trl/test_distributed.py and
tests/engines/trl/test_sharded.py (under torchrun or ``accelerate launch``).

    python -m torch.distributed.run --standalone --nproc_per_node 2 dist_worker.py \\
        DUMP_DIR [--kill-after-save N] [--stall-after-log N] [--short-generation-rank R] \\
        [--fail-write FILE] -- ARGS OF eapo train ...

Runs the ``eapo train`` command (``eapo.cli``) with ARGS and writes what *this* process computed to
``DUMP_DIR/rank<R>.json``, so the test can compare the processes with each other, with
``metrics.jsonl`` and with the single-process maths of :mod:`eapo.core`. Test-only instrumentation:
nothing in the package knows about it. What the trainer reports through public hooks is read there
(``TrainerCallback``: each step's logged H_t, w+, w-, H_0 and loss on every process; the parameters
each process holds at the end of training); what has no public hook is read by wrapping the
trainer's internals in this process: the rewards as gathered over processes, TRL's advantages and
the positive mask of this process's slice (before TRL shuffles the rows), the entropy sums this
process contributed to ``H_t``, and the advantages it trained on. It also records which run-directory
writers it called and, after ``run`` returned, what it read back. ``DUMP_DIR/pid<R>`` holds the
process id from the start; ``DUMP_DIR/shards<R>.pt`` the parameters it held at the end of training
(its own part of each under FSDP2 or ZeRO-3).

Process 1 is made a slow process, deterministically: its clock reads 2 s later (for the default
run-directory name), and it looks at the run directory 1 s after process 0 (which would by then
have written config.yaml if it did not wait for the others).
``--kill-after-save N`` ends every process with ``os._exit(137)`` right after checkpoint N (a hard
kill: no cleanup, no atexit); process 1 first waits 2 s inside its RNG-state save of that checkpoint,
so process 0 finishes first.
``--stall-after-log N``: process 1 stops for good after step N's log (it writes ``DUMP_DIR/stalled``
first), while process 0 goes on and waits for it in the next collective: the test then kills it.
``--short-generation-rank R``: process R generates at most 4 tokens per rollout, so it finishes its
generation long before the other process (what a rank whose rollouts all end early does).
``--fail-write FILE``: process 0's write of FILE fails with ENOSPC (a disk full on its side only):
``metrics.jsonl`` (step 2's line), ``eapo_state.json`` (checkpoint 2's marker) or ``final`` (the final
model: its model card), and records the moment in ``DUMP_DIR/fault``. A process that ends with an
error (any launch) writes it, or the command's exit code, to ``DUMP_DIR/ended<R>``.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback
from trl import GRPOTrainer

import eapo.commands.train
import eapo.engines.trl.args
import eapo.engines.trl.callbacks
import eapo.engines.trl.trainer
import eapo.run_dir
import eapo.train
from eapo.core.step import STATE_FILE
from eapo.engines.trl.trainer import EAPOTrainer
from eapo.run_dir import METRICS_FILE, SUMMARY_FILE, read_metrics

RANK = int(os.environ["RANK"])
steps: list[dict[str, Any]] = []  # one entry per generation step
logged: list[dict[str, Any]] = []  # one entry per optimisation step's log, on this process
writes: list[str] = []  # file names written through the run-directory writers
completion_lengths: list[int] = []  # this process's rollout lengths (tokens), all steps
LOGGED_KEYS = ("entropy/rollout", "eapo/w_pos", "eapo/w_neg", "eapo/H0", "loss")


def _list(tensor: torch.Tensor) -> list:
    return tensor.detach().cpu().tolist()


def _wrap(owner: Any, name: str, around) -> None:
    original = getattr(owner, name)
    setattr(owner, name, functools.wraps(original)(lambda *a, **k: around(original, *a, **k)))


def _trl_generate(original, self, inputs):
    output = original(self, inputs)
    if self.model.training:
        # TRL's group-normalised advantages of this process's slice, before any EAPO weighting
        steps.append({"trl_advantages": _list(output["advantages"])})
        completion_lengths.extend(_list(output["completion_mask"].sum(dim=1)))
    return output


def _eapo_generate(original, self, inputs):
    output = original(self, inputs)
    if self.model.training:
        step = steps[-1]
        step["step"] = self.state.global_step + 1
        per_func = self._gathered_rewards  # [B_all, F]: every process's rows, gathered by TRL
        step["rewards"] = _list((per_func * self.reward_weights.unsqueeze(0)).nansum(dim=1))  # [B_all]
    return output


def _entropy(original, self, values, mask):
    step = steps[-1]
    step["local_entropy_sum"] = float((values.detach() * mask).sum())
    step["local_tokens"] = float(mask.sum())
    step["entropy"] = original(self, values, mask)
    return step["entropy"]


def _decide(original, self, batch, rewards, rows, entropy):
    step = steps[-1]
    step["decided_rows"] = _list(rows)  # the step's rows this process trains, in the order it holds them
    original(self, batch, rewards, rows, entropy)
    step["advantages"] = _list(batch["advantages"])


def _counting(original, path, *args, **kwargs):
    writes.append(Path(path).name)
    return original(path, *args, **kwargs)


def _save_final(original, trainer, tokenizer, run_dir, *args, **kwargs):
    if kwargs.get("is_main", True):
        writes.append("final/")
    return original(trainer, tokenizer, run_dir, *args, **kwargs)


def _dump(dump_dir: Path, **extra: Any) -> None:
    dump_dir.mkdir(parents=True, exist_ok=True)
    path = dump_dir / f"rank{RANK}.json"
    record = {
        "rank": RANK,
        "steps": steps,
        "logged": logged,
        "writes": writes,
        "completion_lengths": completion_lengths,
        **extra,
    }
    path.write_text(json.dumps(record), encoding="utf-8")


class Recorder(TrainerCallback):
    """What the trainer reports through its public hooks, on this process."""

    def __init__(self, dump_dir: Path) -> None:
        self.dump_dir = dump_dir

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:  # an optimisation step's log
            logged.append({"step": state.global_step, **{key: logs.get(key) for key in LOGGED_KEYS}})

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """The parameters this process holds: its own part of each under FSDP2 (a DTensor's local
        rows, ``dim0``) or ZeRO-3 (a slice of the flattened parameter, ``flat``), else all of it."""
        from torch.distributed.tensor import DTensor

        held = {}
        for name, param in model.named_parameters():
            if isinstance(param, DTensor):
                local, layout, shape = param.to_local(), "dim0", param.shape
            elif hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3's partition (param itself is empty)
                local, layout, shape = param.ds_tensor, "flat", param.ds_shape
            else:
                local, layout, shape = param, "full", param.shape
            held[name] = {"tensor": local.detach().clone(), "layout": layout, "shape": tuple(shape)}
        torch.save(held, self.dump_dir / f"shards{RANK}.pt")


class KillAfterSave(TrainerCallback):
    def __init__(self, step: int, dump_dir: Path) -> None:
        self.step = step
        self.dump_dir = dump_dir

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            _dump(self.dump_dir, killed_at=state.global_step)
            os._exit(137)


class StallAfterLog(TrainerCallback):
    """Process 1 stops after step N's log (process 0 has written that line: its callbacks run first)."""

    def __init__(self, step: int, dump_dir: Path) -> None:
        self.step = step
        self.dump_dir = dump_dir

    def on_log(self, args, state, control, logs=None, **kwargs):
        if RANK == 1 and logs and "loss" in logs and state.global_step == self.step:
            (self.dump_dir / "stalled").write_text(str(state.global_step), encoding="utf-8")
            time.sleep(3600)  # until the test kills this process


def _slow_rng_save(step: int):
    def around(original, self, output_dir):
        if RANK == 1 and self.state.global_step == step:
            time.sleep(2.0)
        return original(self, output_dir)

    return around


def _late_on_rank_1(original, *args, **kwargs):
    if RANK == 1:
        time.sleep(1.0)
    return original(*args, **kwargs)


def _short_generation(original, *args, **kwargs):
    args_ = original(*args, **kwargs)
    args_.max_completion_length = 4
    return args_


def _fail_write(name: str, dump_dir: Path, step: int = 2) -> None:
    """Process 0's write of ``name`` at ``step`` raises ENOSPC (a disk full on its side only); the
    moment it does, in ``DUMP_DIR/fault`` (the time, ``time.time()``)."""
    if RANK != 0:
        return

    def disk_full(path) -> OSError:
        (dump_dir / "fault").write_text(repr(time.time()), encoding="utf-8")
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    if name == METRICS_FILE:  # MetricsCallback opens it once per step, to append that step's line
        appends = []

        def failing_open(path, mode="r", *args, **kwargs):
            if Path(path).name == METRICS_FILE and "a" in mode:
                appends.append(path)
                if len(appends) == step:
                    raise disk_full(path)
            return open(path, mode, *args, **kwargs)

        eapo.engines.trl.callbacks.open = failing_open  # the module's own name, found before the builtin
    elif name == STATE_FILE:  # the marker, written last into a checkpoint

        def failing_state(original, folder, *args, **kwargs):
            if Path(folder).name == f"checkpoint-{step}":
                raise disk_full(Path(folder) / STATE_FILE)
            return original(folder, *args, **kwargs)

        _wrap(eapo.engines.trl.trainer, "write_step_state", failing_state)
    elif name == "final":  # final/'s model card, copied in after the weights and the tokenizer

        def failing_copy(original, source, destination, *args, **kwargs):
            if Path(destination).parent.name == ".final.tmp" and Path(destination).name == "README.md":
                raise disk_full(destination)
            return original(source, destination, *args, **kwargs)

        _wrap(eapo.train.shutil, "copyfile", failing_copy)
    else:
        raise SystemExit(f"--fail-write: no injected failure for {name!r}")


class _LaterClock:
    """``time`` as ``eapo.commands.train`` sees it on process 1: 2 s later than process 0's."""

    def strftime(self, fmt: str) -> str:
        return time.strftime(fmt, time.localtime(time.time() + 2.0))


def _option(options: list[str], name: str) -> int | None:
    return int(options[options.index(name) + 1]) if name in options else None


def main(argv: list[str]) -> None:
    split = argv.index("--")
    options, train_args = argv[:split], argv[split + 1 :]
    dump_dir = Path(options[0])
    dump_dir.mkdir(parents=True, exist_ok=True)
    (dump_dir / f"pid{RANK}").write_text(str(os.getpid()), encoding="utf-8")
    kill_at = _option(options, "--kill-after-save")
    stall_at = _option(options, "--stall-after-log")
    short_rank = _option(options, "--short-generation-rank")
    fail_write = options[options.index("--fail-write") + 1] if "--fail-write" in options else None

    _wrap(GRPOTrainer, "_generate_and_score_completions", _trl_generate)
    _wrap(EAPOTrainer, "_generate_and_score_completions", _eapo_generate)
    _wrap(EAPOTrainer, "_rollout_entropy", _entropy)  # H_t from (per-token entropies, mask)
    _wrap(EAPOTrainer, "_decide", _decide)
    _wrap(eapo.train, "atomic_write_text", _counting)
    _wrap(eapo.run_dir, "atomic_write_text", _counting)  # the step state (eapo.run_dir.write_step_state)
    _wrap(eapo.train, "_save_final", _save_final)
    _wrap(eapo.train, "_inspect_run_dir", _late_on_rank_1)
    if RANK == 1:
        eapo.commands.train.time = _LaterClock()
    if fail_write is not None:
        _fail_write(fail_write, dump_dir)
    if short_rank == RANK:
        _wrap(eapo.engines.trl.args, "grpo_args", _short_generation)
    callbacks: list[Any] = [Recorder(dump_dir)]
    if kill_at is not None:
        _wrap(Trainer, "_save_rng_state", _slow_rng_save(kill_at))
        callbacks.append(KillAfterSave(kill_at, dump_dir))
    if stall_at is not None:
        callbacks.append(StallAfterLog(stall_at, dump_dir))
    returned: list[Path] = []

    def run(original, config, output_dir, **kwargs):
        returned.append(original(config, output_dir, **{**kwargs, "callbacks": callbacks}))
        return returned[-1]

    _wrap(eapo.train, "run", run)  # the command imports it when called

    from eapo.cli import app

    try:
        code = app(["train", *train_args], standalone_mode=False)
    except Exception as error:  # one the command does not turn into a message and an exit code
        (dump_dir / f"ended{RANK}").write_text(f"{type(error).__name__}: {error}", encoding="utf-8")
        raise
    if code:
        (dump_dir / f"ended{RANK}").write_text(f"exit code {code}", encoding="utf-8")
        sys.exit(code)

    # Every process reads what the main process wrote: run() returns only once it is all in place.
    (out,) = returned
    summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    final = out / "final"
    _dump(
        dump_dir,
        run_dir=str(out),
        summary_global_step=summary["global_step"],
        metric_steps=[row["step"] for row in read_metrics(out)],
        final_weights=(final / "model.safetensors").is_file()
        or (final / "adapter_model.safetensors").is_file(),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
