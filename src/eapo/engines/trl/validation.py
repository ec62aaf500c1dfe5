"""In-training validation: a fixed dev subset answered by the current policy every ``train.eval_steps``.

The paper's training-dynamics figures include a validation score. Every ``train.eval_steps``
optimisation steps, :class:`Validation` answers the first ``train.eval_limit`` prompts of
``train.eval_split`` (rendered exactly like the training prompts) with the policy being trained —
greedy, or sampled at the rollout temperature and top-p with a per-step seed — through the
generators of ``eapo eval``: the training run's colocated vLLM engine when vLLM makes the rollouts
(its weights synced to the policy's first), else :class:`eapo.runtime.generate.TransformersGenerator`
on the policy itself — and scores the answers with the training composite (the same scorers, weights and ``reward.missing``). The metrics go
into that step's ``metrics.jsonl`` line:

* ``val/reward`` — the mean composite total over the samples it could score;
* ``val/<component>`` — each component's mean (``val/rouge_l``, ``val/reranker``, ``val/format``,
  ``val/llm_judge``);
* ``val/none_frac`` — the fraction of samples without a total; ``val/mean_length`` — mean tokens.

Each answer is appended to ``RUN_DIR/validation.jsonl`` (step, record id, completion, scores), so a
validation score can be recomputed from the text.

Cost and isolation: with several processes each answers its share of the prompts (ZeRO-3 parameters
gathered, as TRL does for generation; under FSDP every process makes the same number of ``generate``
calls) and the main process scores them. Generation runs under
``torch.random.fork_rng``, so a run with validation draws exactly the rollouts of the same run
without it. Without vLLM generation uses the training model's ``generate``: keep ``eval_limit`` small.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Validation", "VALIDATION_FILE", "validation_metrics", "truncate_validation"]

#: Per-sample validation answers, one JSON object per line, in the run directory.
VALIDATION_FILE = "validation.jsonl"


def validation_metrics(result: Any, num_tokens: Sequence[int]) -> dict[str, float]:
    """The ``val/*`` metrics of a :class:`eapo.rewards.CompositeResult` (see the module docstring)."""
    metrics = {
        "val/reward": result.metrics["reward/mean"],
        "val/none_frac": result.metrics["reward/none_frac"],
    }
    for name in result.components:
        metrics[f"val/{name}"] = result.metrics[f"reward/{name}/mean"]
    metrics["val/mean_length"] = sum(num_tokens) / len(num_tokens) if num_tokens else float("nan")
    return metrics


@dataclass
class Validation:
    """A fixed dev subset, the scorer and how to decode; :meth:`run` answers and scores it once.

    Args:
        prompts: rendered prompt texts (the chat template applied, as for training).
        references, questions, ids: one per prompt.
        scorer: the training :class:`eapo.rewards.CompositeReward`.
        tokenizer: a tokenizer of the policy not shared with the trainer (it is set to left padding).
        every: validate at steps that are multiples of this.
        greedy: greedy decoding; else sampled at ``temperature`` / ``top_p`` with seed ``seed + step``.
        max_new_tokens: the rollout length limit.
        stop: the rollouts' stop strings (``rollout.stop``): each answer ends at the first one.
        batch_size: prompts per ``generate`` call.
        output: the ``validation.jsonl`` path (written by the main process), or None.
    """

    prompts: list[str]
    references: list[str | None]
    questions: list[str]
    ids: list[str]
    scorer: Any
    tokenizer: Any
    every: int
    greedy: bool = True
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int = 0
    batch_size: int = 8
    output: Path | None = None

    def due(self, step: int) -> bool:
        """Whether step ``step`` (1-based) validates."""
        return self.every > 0 and step > 0 and step % self.every == 0

    def run(self, trainer: Any) -> dict[str, float]:
        """Answer and score the subset with ``trainer``'s current policy; every process must call it.

        Returns the ``val/*`` metrics on the main process and ``{}`` on the others.
        """
        from accelerate.utils import gather_object
        from trl.models import unwrap_model_for_generation

        from eapo.run_dir import fail_together

        accelerator = trainer.accelerator
        step = trainer.state.global_step
        mine = list(range(accelerator.process_index, len(self.prompts), accelerator.num_processes))
        answers = []
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                accelerator,
                gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.random.fork_rng(devices=devices),
        ):
            training = model.training
            model.eval()
            try:
                generator = self._generator(trainer, model)
                # Every process makes the same number of generate calls: under FSDP each forward
                # all-gathers the layers' shards, so a process with one prompt fewer answers a
                # stand-in prompt (dropped) instead of leaving the others waiting.
                share = -(-len(self.prompts) // accelerator.num_processes)  # ceil
                for start in range(0, share, self.batch_size):
                    chunk = mine[start : start + self.batch_size]
                    groups = generator.generate(
                        [self.prompts[i] for i in chunk] or self.prompts[:1],
                        k=1,
                        temperature=0.0 if self.greedy else self.temperature,
                        top_p=self.top_p,
                        max_new_tokens=self.max_new_tokens,
                        seed=self.seed + step,
                        stop=self.stop,
                    )
                    answers += [(i, group[0]) for i, group in zip(chunk, groups[: len(chunk)], strict=True)]
            finally:
                model.train(training)
        answers = sorted(gather_object(answers), key=lambda pair: pair[0])
        # The main process alone scores and writes; its failure (a judge down, a full disk) ends every process.
        with fail_together(f"validating at step {step}"):
            if accelerator.is_main_process:
                completions = [answer.text for _, answer in answers]
                result = self.scorer.score(
                    self.prompts, completions, self.references, questions=self.questions
                )
                self._write(step, answers, result)
        if not accelerator.is_main_process:
            return {}
        return validation_metrics(result, [answer.num_tokens for _, answer in answers])

    def _generator(self, trainer: Any, model: Any):
        """The colocated vLLM engine, its weights synced to the policy's now (as TRL syncs before a
        generation), or ``generate`` on the policy itself."""
        from eapo.runtime.generate import TransformersGenerator, VLLMGenerator

        if getattr(trainer, "use_vllm", False) and trainer.vllm_mode == "colocate":
            if trainer.state.global_step != trainer._last_loaded_step:
                trainer.vllm_generation.sync_weights()
                trainer._last_loaded_step = trainer.state.global_step
            return VLLMGenerator.from_llm(trainer.vllm_generation.llm, self.tokenizer)
        return TransformersGenerator.from_model(model, self.tokenizer)

    def _write(self, step: int, answers: list[tuple[int, Any]], result: Any) -> None:
        if self.output is None:
            return
        with open(self.output, "a", encoding="utf-8") as f:
            for row, (index, answer) in enumerate(answers):
                record = {
                    "step": step,
                    "id": self.ids[index],
                    "completion": answer.text,
                    "num_tokens": answer.num_tokens,
                    "finished": answer.finished,
                    "reward": result.rewards[row],
                    "scores": {name: scores[row] for name, scores in result.components.items()},
                }
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def truncate_validation(run_dir: Path, last_step: int) -> None:
    """Keep only the ``validation.jsonl`` lines of steps ``<= last_step`` (on resume from that checkpoint)."""
    from eapo.run_dir import atomic_write_text

    path = Path(run_dir) / VALIDATION_FILE
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= last_step:
                kept.append(line + "\n")
        except json.JSONDecodeError:
            continue  # a torn last line (a kill mid-write)
    atomic_write_text(path, "".join(kept))
