"""The ``algorithm`` section: the method (a polarity weighting scheme or an entropy-control preset),
the scheme's weights, the PPO/GRPO objective, how ``H_t`` is aggregated, and the entropy controls of
:mod:`eapo.core.controls` with the defaults that leave every one of them off.

Each setting is checked alone by its field; the relations between the resolved entropy-control
settings are :meth:`AlgorithmConfig.control_problems` (errors) and
:meth:`AlgorithmConfig.inert_controls` (warnings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from eapo.config.fields import ANY_OF_TYPE, at_least, between, one_of, setting, with_settings
from eapo.core import (
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    METHODS,
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    AdvantageScale,
    check_weights,
    control_defaults,
    control_problems,
    method_scheme,
    resolve_controls,
)
from eapo.core.controls import applied_by_eapo

#: The entropy controls' settings when neither the user nor the method preset sets them: every control off
#: (their declared defaults, :data:`eapo.core.CONTROL_SETTINGS`).
CONTROL_DEFAULTS: dict[str, Any] = control_defaults()

#: TRL loss types eapo's Clip-Cov / KL-Cov path aggregates like (grpo: 1/|y_i|; bnpo: token-mean).
COV_LOSS_TYPES = ("grpo", "bnpo")
#: algorithm.loss_type: TRL 1.16's GRPOConfig.loss_type values.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")


@dataclass
@with_settings("kl_bias_correction", CONTROL_SETTINGS.values())
@with_settings("anchor_steps", STEP_SETTINGS.values(), nullable=False)
@with_settings("method", WEIGHT_SETTINGS.values())
class AlgorithmConfig:
    """The ``algorithm`` section. The weights (``w_pos`` ... ``anchor_steps``), ``split_by``,
    ``quantile_k``, ``quantile_method``, ``entropy_agg`` and every entropy-control setting are not written
    here: each is declared once in :mod:`eapo.core` (:data:`~eapo.core.WEIGHT_SETTINGS`,
    :data:`~eapo.core.STEP_SETTINGS`, :data:`~eapo.core.CONTROL_SETTINGS`) and derived into this section by :func:`with_settings`. A
    weight or control left null takes the scheme's or the preset's value."""

    method: str = setting(
        f"Method: a polarity weighting scheme ({', '.join(WEIGHTING_SCHEMES)}) or an entropy-control "
        "preset, which is GRPO's weights (1, 1) plus that control's settings from its source "
        f"({', '.join(ENTROPY_CONTROLS)}; see eapo.core.ENTROPY_CONTROLS). Any control's settings below also "
        "compose with any scheme.",
        "eapo",
        valid=one_of(*METHODS),
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

    def weighting_method(self) -> str:
        """The polarity weighting scheme this method uses: the method itself, or GRPO for a control preset."""
        return method_scheme(self.method)

    def weights(self) -> dict[str, Any]:
        """The weights that are set (not null), by key."""
        return {key: getattr(self, key) for key in WEIGHT_SETTINGS if getattr(self, key) is not None}

    def weighting_overrides(self) -> dict[str, Any]:
        """The set weights, checked against the scheme (:func:`eapo.core.check_weights`, the one "does not
        apply" rule); raises ValueError naming ``algorithm.<key>``."""
        return check_weights(self.method, self.weighting_method(), self.weights(), "algorithm.")

    def control_values(self) -> dict[str, Any]:
        """Every entropy-control setting's value, by name (resolved after :meth:`resolve_controls`)."""
        return {key: getattr(self, key) for key in CONTROL_SETTINGS}

    def resolve_controls(self) -> None:
        """Fill every unset entropy-control setting: the method preset's value, else the default (off)
        (:func:`eapo.core.resolve_controls`, the one resolution every engine uses)."""
        values = {key: getattr(self, key) for key in CONTROL_SETTINGS}
        for key, value in resolve_controls(self.method, values).items():
            setattr(self, key, value)

    def control_problems(self) -> list[str]:
        """What is wrong between the (resolved) entropy-control settings, one message per problem (each
        setting alone is checked by its field's ``valid``): the controls' own rules
        (:func:`eapo.core.controls.control_problems`, verl's too), then what TRL cannot run."""
        values = self.control_values()
        problems = control_problems(values, "algorithm.")  # each control's own rules (core)
        # where eapo forms TRL's loss: a loss_mode's policy loss, or a control TRL lacks weighting it
        weighted = [c.name for c in applied_by_eapo("trl", values) if c.token_weights is not None]
        formed_by_eapo = [f"loss_mode={self.loss_mode}"] if self.loss_mode != "vanilla" else []
        formed_by_eapo += [f"method or keys of {name}" for name in weighted]
        if formed_by_eapo:
            if self.entropy_coef > 0 or self.adaptive_entropy:
                problems.append(
                    f"algorithm.{formed_by_eapo[0]} with an entropy bonus (entropy_coef={self.entropy_coef}, "
                    f"adaptive_entropy={self.adaptive_entropy}) cannot run on TRL: eapo forms the loss there in "
                    "place of TRL's, whose entropy bonus it does not re-implement; drop one of the two, or run "
                    "the pair on verl (actor.entropy_coeff composes with eapo's loss there)"
                )
            if self.loss_type not in COV_LOSS_TYPES:
                problems.append(
                    f"algorithm.{formed_by_eapo[0]}: eapo's loss aggregates as algorithm.loss_type grpo (1/|y_i|, "
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
