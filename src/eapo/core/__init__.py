"""The algorithm core of EAPO: pure tensor maths, no model, I/O or config objects.

Everything the engines (TRL, verl) and users' own code need lives here, one module per concern:

* :mod:`eapo.core.advantages` — group-relative advantages (GRPO, Eq. "A_i" in Section 2.2 of the EAPO
  paper), the reward-mean polarity split D+ / D- (Section 2.2), polarity-weighted advantages
  Â_i = w+·A_i on D+, w-·A_i on D- (Section 4.1);
* :mod:`eapo.core.weighting` — the entropy-driven positive weight  w+_t = clip(w0 · H_t / H_0, w_min, w_max)
  (Eq. ``dynamic_weight``; closed form of the recursion in the appendix "Formula Derivation") and the
  registry of weighting schemes (:data:`WEIGHTING_SCHEMES`), filled by :func:`register_weighting`
  (as verl's ``register_adv_est``);
* :mod:`eapo.core.entropy` — masked means, the rollout entropy ``H_t`` with a named
  aggregation (:func:`rollout_entropy`, the one definition both engines share);
* :mod:`eapo.core.losses` — the importance weights between the trainer and a vLLM rollout engine
  (:func:`importance_correction`, TRL 1.16's modes), the PPO-clip surrogate of Eq. ``grpo`` with named
  loss aggregations and the k1/k2/k3 KL estimators (the objective in tensors; tests hold each engine's
  loss against them);
* :mod:`eapo.core.controls` — the field's entropy controls (presets, Clip-Cov / KL-Cov losses,
  the top-entropy mask, the adaptive entropy coefficient), registered by :func:`register_entropy_control`;
* :mod:`eapo.core.step` — the whole per-step decision both engines delegate to: group statistics by
  group id that tolerate unscorable (NaN) rollouts and uneven groups, the split, ``(w+, w-)``, ``H_0``,
  the ``eapo/*`` metrics and the one checkpointed state (:class:`EAPOStep`).

Every public name is importable from ``eapo.core``. The chunked LM-head kernel of the TRL engine's
log-prob head is :mod:`eapo.engines.trl.lm_head` (an engine's performance kernel, not EAPO's maths).

Departures from the paper, all opt-in and off by default:

* ``positive_mask(by="median")`` splits at the group median (the paper's Limitations section notes
  the mean's sensitivity to outliers);
* ``EntropyAdaptiveWeighting(anchor_steps=k)`` anchors H_0 on the mean of the first k entropies
  (k = 1 is the paper);
* ``group_advantages(scale="batch" | "none")`` for batch-std (REINFORCE++-style) and
  mean-centred (Dr. GRPO) advantages.

Shapes follow verl's notation: ``B`` = number of sequences (``num_prompts * group_size``),
``G`` = group size, ``T`` = response length, ``V`` = vocabulary size.
"""

from __future__ import annotations

# The maths lives in one module per concern; everything is importable from ``eapo.core``.
from eapo.core.advantages import (
    QUANTILE_METHODS,
    AdvantageScale,
    group_advantages,
    positive_mask,
    weight_advantages,
)
from eapo.core.entropy import (
    ENTROPY_AGGREGATIONS,
    entropy_sums,
    masked_mean,
    rollout_entropy,
)
from eapo.core.losses import (
    IMPORTANCE_CORRECTIONS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    aggregate_loss,
    importance_correction,
    importance_correction_counts,
    kl_penalty,
    ppo_clip_per_token,
)
from eapo.core.settings import Setting, SettingError, Valid
from eapo.core.weighting import (
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    EntropyAdaptiveWeighting,
    FixedWeighting,
    Scheme,
    WeightingScheme,
    check_weights,
    make_weighting,
    register_scheme,
    register_weighting,
    scheme_defaults,
)

__all__ = [
    "AdvantageScale",
    "QUANTILE_METHODS",
    "group_advantages",
    "positive_mask",
    "weight_advantages",
    "WeightingScheme",
    "FixedWeighting",
    "EntropyAdaptiveWeighting",
    "make_weighting",
    "WEIGHTING_SCHEMES",
    "WEIGHT_SETTINGS",
    "check_weights",
    "scheme_defaults",
    "Setting",
    "Valid",
    "SettingError",
    "register_weighting",
    "register_scheme",
    "Scheme",
    "masked_mean",
    "ENTROPY_AGGREGATIONS",
    "entropy_sums",
    "rollout_entropy",
    "IMPORTANCE_CORRECTIONS",
    "importance_correction",
    "importance_correction_counts",
    "aggregate_loss",
    "LOSS_AGGREGATIONS",
    "ppo_clip_per_token",
    "kl_penalty",
    "KL_ESTIMATORS",
]


# The field's entropy controls (presets, Clip-Cov / KL-Cov losses, the top-entropy mask, the adaptive
# entropy coefficient) live in their own module and are re-exported here.
from eapo.core.controls import (  # noqa: E402
    CONTROL_METRICS,
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    LOSS_MODES,
    AdaptiveEntropyCoef,
    EntropyControl,
    clip_cov_mask,
    clip_cov_policy_loss,
    control_defaults,
    control_problems,
    kl_cov_mask,
    kl_cov_policy_loss,
    register_entropy_control,
    resolve_controls,
    top_entropy_mask,
)

__all__ += [
    "CONTROL_METRICS",
    "CONTROL_SETTINGS",
    "control_defaults",
    "control_problems",
    "resolve_controls",
    "ENTROPY_CONTROLS",
    "LOSS_MODES",
    "AdaptiveEntropyCoef",
    "EntropyControl",
    "clip_cov_mask",
    "clip_cov_policy_loss",
    "kl_cov_mask",
    "kl_cov_policy_loss",
    "register_entropy_control",
    "top_entropy_mask",
]

# The per-step decision of both engines (group statistics by index, the split, weights, H_0, metrics,
# state): :mod:`eapo.core.step`.
from eapo.core.step import (  # noqa: E402
    METRIC_KEYS,
    STATE_FILE,
    STEP_SETTINGS,
    EAPOStep,
    combined_rewards,
    grouped_advantages,
    grouped_polarity_advantages,
    polarity_split,
)

__all__ += [
    "METRIC_KEYS",
    "STATE_FILE",
    "STEP_SETTINGS",
    "EAPOStep",
    "combined_rewards",
    "grouped_advantages",
    "grouped_polarity_advantages",
    "polarity_split",
]

# One run's algorithm as one frozen value, resolved and validated once: :mod:`eapo.core.algorithm`.
from eapo.core.algorithm import (  # noqa: E402
    OBJECTIVE_SETTINGS,
    Algorithm,
    methods,
    scheme_of_method,
)

#: The polarity weighting scheme of a method (the method, or ``grpo`` for an entropy-control preset).
method_scheme = scheme_of_method

__all__ += ["OBJECTIVE_SETTINGS", "Algorithm", "methods", "scheme_of_method", "method_scheme"]
