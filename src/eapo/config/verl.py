"""The ``verl`` section: settings of ``eapo train --engine verl`` that only verl's run has (the number of
FSDP workers). The TRL engine ignores it."""

from __future__ import annotations

from dataclasses import dataclass

from eapo.config.fields import at_least, setting


@dataclass
class VerlConfig:
    workers: int | None = setting(
        "engine=verl: FSDP workers (data-parallel ranks) the actor and reference are sharded over, one "
        "vLLM rollout replica beside each (trainer.n_gpus_per_node on one node); null: the GPUs present, "
        "or 1 on a CPU. On a CPU the workers talk over gloo. train.prompts_per_step × "
        "rollout.num_generations must split evenly over them, each share a multiple of "
        "train.micro_batch_size.",
        None,
        valid=at_least(1),
    )
