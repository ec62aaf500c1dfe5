"""The ``algorithm`` section: the method (a polarity weighting scheme or an entropy-control preset),
the scheme's weights, the PPO/GRPO objective, how ``H_t`` is aggregated, and the entropy controls of
:mod:`eapo.core.entropy_control` with the defaults that leave every one of them off.

Each setting is checked alone by its field; the relations between the resolved entropy-control
settings are :meth:`AlgorithmConfig.control_problems` (errors) and
:meth:`AlgorithmConfig.inert_controls` (warnings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from eapo.config.fields import ANY_OF_TYPE, FINITE, above, at_least, between, one_of, setting
from eapo.core import (
    ENTROPY_AGGREGATIONS,
    ENTROPY_CONTROLS,
    LOSS_MODES,
    METHODS,
    WEIGHTING_SCHEMES,
    AdvantageScale,
    method_scheme,
)

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
#: algorithm.loss_type: TRL 1.16's GRPOConfig.loss_type values.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")


@dataclass
class AlgorithmConfig:
    method: str = setting(
        "Method: a polarity weighting scheme (grpo, psr, nsr, w_reinforce, eapo) or an entropy-control "
        "preset, which is GRPO's weights (1, 1) plus that control's settings from its source "
        "(entropy_bonus, adaptive_entropy, clip_higher, clip_cov, kl_cov, top_entropy; see "
        "eapo.core.ENTROPY_CONTROLS). Any control's settings below also compose with any scheme.",
        "eapo",
        valid=one_of(*METHODS),
    )
    w_pos: float | None = setting("Fixed positive weight w+ (fixed schemes).", None, valid=at_least(0))
    w_neg: float | None = setting("Negative weight w- (every scheme).", None, valid=at_least(0))
    w0: float | None = setting("EAPO base positive weight (default 0.2).", None, valid=at_least(0))
    w_min: float | None = setting("EAPO lower clip (default 0).", None, valid=at_least(0))
    w_max: float | None = setting("EAPO upper clip (default 2).", None, valid=at_least(0))
    anchor_steps: int | None = setting(
        "EAPO: steps averaged into H_0 (default 1, the paper).", None, valid=at_least(1)
    )
    split_by: str = setting(
        "Polarity split at the group 'mean' (paper) or 'median'.", "mean", valid=one_of("mean", "median")
    )
    scale_rewards: str = setting(
        "Advantage scaling: group (GRPO), batch or none.", "group", valid=one_of(*get_args(AdvantageScale))
    )
    beta: float = setting(
        "KL coefficient to the frozen reference model (the paper: 0.001).", 0.001, valid=at_least(0)
    )
    epsilon: float = setting(
        "PPO clip range ε (the paper: 0.2).", 0.2, valid=between(0, 1, low_open=True, high_open=True)
    )
    epsilon_high: float | None = setting(
        "Clip-higher, DAPO (Yu et al. 2025, arXiv 2503.14476): the PPO ratio's upper clip 1 + epsilon_high "
        "(default: epsilon; the clip_higher preset: DAPO's 0.28). TRL: epsilon_high; verl: "
        "actor.clip_ratio_high. Acts only where the policy moved since sampling (num_iterations > 1).",
        None,
        valid=above(0),
    )
    loss_type: str = setting(
        "TRL loss aggregation; 'grpo' is the paper's 1/|y_i| (seq-mean-token-mean).",
        "grpo",
        valid=one_of(*LOSS_TYPES),
    )
    num_iterations: int = setting("Policy updates per generation batch (μ).", 1, valid=at_least(1))
    kl_bias_correction: bool = setting(
        "Multiply the k3 KL term by the importance ratio (TRL's use_bias_correction_kl); off is the "
        "paper's objective and verl's low_var_kl.",
        False,
        valid=ANY_OF_TYPE,
    )
    entropy_agg: str = setting(
        "How H_t averages per-token entropies: token-mean (every completion token weighs the same) or "
        "seq-mean-token-mean (every rollout weighs the same); the same definition on TRL and verl.",
        "token-mean",
        valid=one_of(*ENTROPY_AGGREGATIONS),
    )
    # --- entropy controls (eapo.core.entropy_control); null = the preset's value, else the default ---
    entropy_coef: float | None = setting(
        "Entropy bonus, PPO's entropy term (Schulman et al. 2017): loss − entropy_coef · mean token entropy "
        "(default 0: off; the entropy_bonus preset: 0.01, PPO's c2). With adaptive_entropy, the initial "
        "coefficient. TRL: entropy_coef; verl: actor.entropy_coeff.",
        None,
        valid=at_least(0),
    )
    adaptive_entropy: bool | None = setting(
        "Adaptive entropy bonus, Skywork-OR1 (He et al. 2025, arXiv 2505.22312): after every update the "
        "coefficient moves by ±entropy_coef_delta, up while the update's entropy is at or below the target, "
        "and applies only then (default false; the adaptive_entropy preset: true). TRL: use_adaptive_entropy; "
        "verl: eapo.core.AdaptiveEntropyCoef.",
        None,
        valid=ANY_OF_TYPE,
    )
    entropy_target: float | None = setting(
        "Adaptive entropy's target in nats per token; null: entropy_target_ratio × H_0, the run's own "
        "first-step rollout entropy (per-token entropy of open-ended answers differs by model, tokenizer "
        "and language, so Skywork-OR1's and TRL's 0.2 from math RL would never trigger here).",
        None,
        valid=at_least(0),
    )
    entropy_target_ratio: float | None = setting(
        "Adaptive entropy with entropy_target null: target = entropy_target_ratio × H_0 (default 1.0: hold "
        "the starting entropy, the reference EAPO's w+ uses).",
        None,
        valid=above(0),
    )
    entropy_coef_delta: float | None = setting(
        "Adaptive entropy: the coefficient's step per update (default 0.005, TRL's and Skywork-OR1's).",
        None,
        valid=at_least(0),
    )
    entropy_coef_min: float | None = setting(
        "Adaptive entropy: the coefficient's lower bound (default 0).", None, valid=at_least(0)
    )
    entropy_coef_max: float | None = setting(
        "Adaptive entropy: the coefficient's upper bound (default 1).", None, valid=at_least(0)
    )
    loss_mode: str | None = setting(
        "Policy loss: vanilla (the paper's PPO-clip), clip_cov or kl_cov (Cui et al. 2025, 'The Entropy "
        "Mechanism of RL for Reasoning LMs', arXiv 2505.22617: covariance-selected tokens lose their "
        "gradient / get a |log ratio| penalty). Default vanilla. verl: actor.policy_loss.loss_mode; TRL: "
        "eapo.core.clip_cov_policy_loss / kl_cov_policy_loss.",
        None,
        valid=one_of(*LOSS_MODES),
    )
    clip_cov_ratio: float | None = setting(
        "Clip-Cov: share of tokens whose gradient is cut (default 2e-4, verl's).",
        None,
        valid=between(0, 1, low_open=True),
    )
    clip_cov_lb: float | None = setting(
        "Clip-Cov: lower covariance bound of candidates (default 1, verl's).", None, valid=FINITE
    )
    clip_cov_ub: float | None = setting(
        "Clip-Cov: upper covariance bound of candidates (default 5, verl's).", None, valid=FINITE
    )
    kl_cov_ratio: float | None = setting(
        "KL-Cov: share of highest-covariance tokens penalised (default 2e-4, verl's).",
        None,
        valid=between(0, 1, low_open=True),
    )
    ppo_kl_coef: float | None = setting(
        "KL-Cov: coefficient of the |log ratio| penalty (default 0.1, verl's). Zero at the first update of a "
        "batch (ratio 1), so it acts only with num_iterations > 1.",
        None,
        valid=at_least(0),
    )
    top_entropy_quantile: float | None = setting(
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
