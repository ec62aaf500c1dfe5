"""The ``train`` section (steps, batch sizes, the optimiser, checkpoints, validation during training,
the update's LM head) and the ``logging`` section (experiment trackers, TensorBoard, progress, plots)."""

from __future__ import annotations

from dataclasses import dataclass

from eapo.config.fields import (
    ANY_OF_TYPE,
    NON_EMPTY,
    SPLIT,
    above,
    at_least,
    between,
    one_of,
    satisfies,
    setting,
)

#: train.lr_scheduler: transformers' SchedulerType values (tests/config/test_config_validation.py
#: compares them).
LR_SCHEDULERS = (
    "linear",
    "cosine",
    "cosine_with_restarts",
    "polynomial",
    "constant",
    "constant_with_warmup",
    "inverse_sqrt",
    "reduce_lr_on_plateau",
    "cosine_with_min_lr",
    "cosine_warmup_with_min_lr",
    "warmup_stable_decay",
    "greedy",
)

_MAX_STEPS = satisfies(lambda v: v == -1 or v >= 1, "an integer >= 1, or -1 (train.num_epochs epochs)")


@dataclass
class TrainConfig:
    max_steps: int = setting("Optimisation steps (-1: run num_epochs).", -1, valid=_MAX_STEPS)
    num_epochs: float = setting(
        "Epochs over the prompts when max_steps is -1 (the paper: 10).", 1.0, valid=above(0)
    )
    prompts_per_step: int = setting(
        "Prompts per optimisation step, all processes (the paper: 32).", 32, valid=at_least(1)
    )
    micro_batch_size: int = setting("Completions per device per forward/backward.", 8, valid=at_least(1))
    learning_rate: float = setting("Peak learning rate (the paper: 1e-6).", 1e-6, valid=above(0))
    lr_scheduler: str = setting("transformers scheduler name.", "constant", valid=one_of(*LR_SCHEDULERS))
    warmup_ratio: float = setting("Warm-up fraction.", 0.0, valid=between(0, 1, high_open=True))
    weight_decay: float = setting("AdamW weight decay.", 0.0, valid=at_least(0))
    max_grad_norm: float = setting("Gradient clipping.", 1.0, valid=at_least(0, " (0: no clipping)"))
    seed: int = setting("Seed for data order, sampling and initialisation.", 0, valid=between(0, 2**32 - 1))
    save_steps: int = setting(
        "Checkpoint every this many steps (0: only at the end).",
        50,
        valid=at_least(0, " (0: only at the end)"),
    )
    save_total_limit: int | None = setting("Keep at most this many checkpoints.", 2, valid=at_least(1))
    eval_steps: int = setting(
        "Every this many steps, answer a fixed dev subset and log val/<metric> in that step's line (0: never).",
        0,
        valid=at_least(0, " (0: no validation)"),
    )
    eval_limit: int = setting(
        "Validation prompts: the first eval_limit of train.eval_split.", 32, valid=at_least(1)
    )
    eval_split: str = setting(
        "Split the validation prompts come from (see eapo.data.load).", "dev", valid=SPLIT
    )
    eval_sampling: str = setting(
        "Validation decoding: greedy, or sampled at rollout.temperature / rollout.top_p (seeded per step).",
        "greedy",
        valid=one_of("greedy", "sampled"),
    )
    lm_head: str = setting(
        "How the update computes log-probs and entropies: trl (TRL's fused LM head), eapo (completion "
        "positions only, eapo.engines.trl.policy_forward) or auto (eapo where TRL has no Triton kernel, i.e. off "
        "CUDA/XPU). Same numbers either way (tested).",
        "auto",
        valid=one_of("auto", "eapo", "trl"),
    )
    share_frozen_layers: bool = setting(
        "With lm_head eapo: leading layers that hold no trainable parameter (LoRA on the last N layers) "
        "run once per step for the reference and the policy. Same numbers (tested).",
        True,
        valid=ANY_OF_TYPE,
    )


#: logging.report_to's trackers: transformers' integrations (TRL's report_to), less "all" (it would add a
#: second TensorBoard writer); "tensorboard" is eapo's own writer under RUN_DIR/tensorboard.
TRACKERS = (
    "tensorboard",
    "wandb",
    "trackio",
    "mlflow",
    "comet_ml",
    "neptune",
    "clearml",
    "dvclive",
    "swanlab",
    "azure_ml",
    "dagshub",
    "flyte",
    "codecarbon",
    "kubeflow",
)


@dataclass
class LoggingConfig:
    report_to: list[str] = setting(
        "Experiment trackers that receive every step's metrics: tensorboard (eapo's writer, RUN_DIR/tensorboard, "
        "with logging.tensorboard), wandb, trackio, mlflow, ... (transformers' integrations, configured by their "
        "own environment variables, e.g. WANDB_MODE, TRACKIO_DIR, MLFLOW_TRACKING_URI); [] for none. "
        "metrics.jsonl is always written.",
        factory=lambda: ["tensorboard"],
        valid=satisfies(
            lambda v: isinstance(v, list) and all(t in TRACKERS for t in v),
            "a list of trackers (" + ", ".join(TRACKERS) + "), or []",
        ),
    )
    project: str = setting(
        "Project name the trackers file the run under (its run name is the run directory's).",
        "eapo",
        valid=NON_EMPTY,
    )
    tensorboard: bool = setting(
        "Write TensorBoard events under RUN_DIR/tensorboard.", True, valid=ANY_OF_TYPE
    )
    progress: bool = setting("Show a progress bar with ETA, entropy, w+ and reward.", True, valid=ANY_OF_TYPE)
    plot: bool = setting("Write RUN_DIR/dynamics.png at the end.", True, valid=ANY_OF_TYPE)
    rollouts: int = setting(
        "Every this many steps, write the step's rollouts to RUN_DIR/rollouts.jsonl (step, prompt, "
        "completion, each reward component, the total, the advantage, the polarity, the weight and why "
        "generation ended), appended and flushed like metrics.jsonl; 0: never.",
        0,
        valid=at_least(0, " (0: no rollouts written)"),
    )
