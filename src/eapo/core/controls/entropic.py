"""EntroPIC (Yang et al. 2025, arXiv 2511.15248): a PI controller on entropy reweights the policy loss of
high-probability tokens, positive-advantage ones by ``1 + α`` and negative-advantage ones by ``1 − α``.

Neither TRL 1.16 nor verl 0.9.1 has it, so both engines run it through the registry's generic path: its
run state (:class:`EntroPICController`) is kept by core's step, which gives each update ``α`` and then
moves the controller with the step's entropy; its per-token weights (:func:`entropic_token_weights`)
multiply the per-token policy loss (not the KL term).

The reference (``yk7333/EntroPIC``: ``dp_actor.py`` ``update_policy`` and ``core_algos.py``
``compute_policy_loss_entropic``; ``Kp``, ``Ki`` from its actor config and launch script ``run_entropic.sh``,
``τ = 0.95`` fixed there as ``high_prob_thresh``, a setting here) and where eapo departs:

* **The controller.** With ``e = H − H_tar`` the entropy error and ``I`` the integral of past errors,
  ``α = clip(Kp · e + Ki · I, −1, 1)``, then ``I ← I + e`` (the reference adds ``e_k · n_k / n_mini`` per
  micro-batch ``k`` of ``n_k`` sequences: per mini-batch and PPO epoch, the sequence-weighted mean of its
  micro-batches' errors). Defaults ``Kp = 1``, ``Ki = 0.01``; the reference's
  target is a number (0.1 nats in its script), eapo's default anchors it at ``entropic_target_ratio × H_0``
  (the run's first-step rollout entropy, as EAPO's ``H_0`` and the adaptive bonus's target are).
* **Which entropy.** The reference measures ``H`` per micro-batch on the update's own forward (the
  loss-aggregated mean of its per-token entropies) and moves ``α`` and ``I`` per micro-batch. eapo
  measures EAPO's quantity once per step: ``H_t``, the rollout entropy (``entropy/rollout``, averaged as
  ``entropy_agg``). With one micro-batch per step and ``μ = 1`` both are the current policy's entropy on
  the step's rollouts at the start of the update (on TRL ``H_t`` is then taken from that very forward).
* **When α applies.** The reference's ``α`` for a micro-batch has the newest error in its P term and the
  errors before it in its I term: ``α_k = clip(Kp · e_k + Ki · I_{k−1})``, from the entropy of the very
  forward it weights. eapo's ``H_t`` is known before step ``t``'s update too (both engines measure it on
  the rollouts with the parameters that generated them, before the loss is formed), so the step applies
  the same value at step ``t``: core's step moves this controller with ``H_t`` first (``observe``:
  ``α_t = clip(Kp · e_t + Ki · I_{t−1})``, then ``I_t = I_{t−1} + e_t``) and then hands the update
  ``α_t`` (``loss_inputs()``), as :attr:`EntroPICController.observe_first` asks. With the target anchored
  at ``H_0`` step 1's error is 0, so step 1 applies ``α = 0``; a fixed target applies ``Kp · e_1``.
* **The weights, and their equivalence to the reference's added term.** The reference adds a term to the
  PPO loss: ``L = agg(ℓ, m) + α · agg(−ρ · |A|, m · [p > τ])`` with ``ℓ`` the clipped per-token PPO loss,
  ``ρ`` the ratio, ``p = π(token)`` under the policy being updated and ``τ = 0.95``. On a token whose ratio
  is inside the clip range ``ℓ = −ρ · A``, so ``−ρ · |A| = sign(A) · ℓ`` and the token's loss becomes
  ``(1 + α · sign(A)) · ℓ``: positive-advantage tokens weighted ``1 + α``, negative ones ``1 − α``
  (``α > 0``, entropy above target: sharpening on the positives is strengthened, so entropy falls;
  ``α < 0``: weakened, so it rises). eapo multiplies ``w = 1 + α · sign(A) · [p > τ]`` into the per-token
  policy loss. Two departures: (1) the reference normalises its added term over the high-probability
  tokens only (``agg_loss`` with the mask ``m · [p > τ]``), so under token-mean its ``α`` acts as
  ``α · N / N_high`` of eapo's (``N`` response tokens, ``N_high`` those above ``τ``; per sequence under
  seq-mean-token-mean); eapo's ``α`` is the loss coefficient as the weighting states it, ``w ∈ [0, 2]``.
  (2) Where the clip acts (``μ > 1``, off-policy) the reference's added term is unclipped and keeps a
  gradient; eapo's weight scales the clipped loss, which has none. On-policy with ``μ = 1`` every ratio
  is 1 and (2) never arises.
* **Resume.** The reference keeps ``I`` in the actor and loses it on restart; eapo saves the controller
  (``I``, the last error, the last step's ``α``, the anchored target) in ``eapo_state.json`` under
  ``controls.entropic`` and refuses a resume with other settings.

Metrics (this control's documented keys, logged each step on both engines): ``entropic/alpha`` (the ``α``
this step's update applies, from this step's error), ``entropic/integral`` (``I`` after this step's error)
and ``entropic/error`` (this step's ``e_t = H_t − H_tar``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from eapo.core.controls.registry import (
    EntropyControl,
    TokenInputs,
    check_resumed_settings,
    finite,
    register_entropy_control,
    state_from_settings,
    stray_settings,
    switched_problems,
)
from eapo.core.settings import ANY_OF_TYPE, Setting, above, at_least, between

__all__ = ["ENTROPIC_METRICS", "EntroPICController", "entropic_token_weights"]

_SOURCE = "EntroPIC (Yang et al. 2025, arXiv 2511.15248)"
_REFERENCE = f"{_SOURCE}; its code's defaults (yk7333/EntroPIC)"

#: The metric keys the controller logs each step (:meth:`EntroPICController.metrics`).
ENTROPIC_METRICS = {
    "alpha": "entropic/alpha",  # the α this step's update applies
    "integral": "entropic/integral",  # I, the sum of the entropy errors up to this step
    "error": "entropic/error",  # this step's error e_t = H_t − H_tar
}


@dataclass
class EntroPICController:
    """EntroPIC's PI controller on the rollout entropy, one update per step (see the module docstring for
    the reference's per-micro-batch form and the timing).

    ``observe(H_t)``, with ``e_t = H_t − target``: ``alpha ← clip(kp · e_t + ki · integral, −1, 1)`` (the
    α this step's update applies, :meth:`loss_inputs`), then ``integral ← integral + e_t``. ``target`` is
    nats per token, or None to anchor it at ``target_ratio × H_0`` once :meth:`anchor` is called with the
    run's first-step entropy. ``threshold`` is not used here (the token weights read it); it is kept so
    that a resume with another threshold is refused.
    """

    #: core's step calls :meth:`observe` with ``H_t`` before :meth:`loss_inputs`: step ``t``'s α is
    #: from step ``t``'s error (:meth:`eapo.core.EAPOStep.control_inputs`).
    observe_first: ClassVar[bool] = True

    kp: float = 1.0
    ki: float = 0.01
    threshold: float = 0.95
    target: float | None = None
    target_ratio: float = 1.0
    integral: float = 0.0
    error: float | None = None  # e of the last observed step (None before the first)
    alpha: float = 0.0  # the α of the last observed step, which its update applies

    def __post_init__(self) -> None:
        for name in ("kp", "ki"):
            if finite(name, getattr(self, name)) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if finite("target_ratio", self.target_ratio) <= 0:
            raise ValueError(f"target_ratio must be > 0, got {self.target_ratio}")
        if not 0.0 <= finite("threshold", self.threshold) < 1.0:
            raise ValueError(f"threshold must lie in [0, 1), got {self.threshold}")
        if self.target is not None and finite("target", self.target) < 0:
            raise ValueError(f"target must be >= 0, got {self.target}")

    def anchor(self, h0: float) -> None:
        """Fix an unset target at ``target_ratio × h0`` (the run's first-step entropy)."""
        if self.target is None:
            self.target = self.target_ratio * finite("H_0", h0)

    def loss_inputs(self) -> dict[str, float]:
        """This step's update's input, after :meth:`observe` of its ``H_t``: ``entropic_alpha``."""
        return {"entropic_alpha": self.alpha}

    def observe(self, entropy: float) -> None:
        """Move the controller with this step's ``H_t`` (before :meth:`loss_inputs`, which hands this α to
        this step's update): the error, α (P on this error, I on the errors before it, as the reference
        orders them), then the integral.

        Raises:
            ValueError: the target is unset (call :meth:`anchor` first) or ``entropy`` is not finite.
        """
        if self.target is None:
            raise ValueError("the EntroPIC target is unset: call anchor(H_0) first")
        error = finite("entropy", entropy) - self.target
        self.alpha = min(max(self.kp * error + self.ki * self.integral, -1.0), 1.0)
        self.integral += error
        self.error = error

    def metrics(self) -> dict[str, float]:
        """This step's :data:`ENTROPIC_METRICS` (after :meth:`observe`; no error before the first)."""
        metrics = {ENTROPIC_METRICS["alpha"]: self.alpha, ENTROPIC_METRICS["integral"]: self.integral}
        if self.error is not None:
            metrics[ENTROPIC_METRICS["error"]] = self.error
        return metrics

    def settings(self) -> dict[str, float]:
        """The configured settings a resume must keep."""
        return {"kp": self.kp, "ki": self.ki, "threshold": self.threshold, "target_ratio": self.target_ratio}

    def state_dict(self) -> dict[str, Any]:
        return {
            "integral": self.integral,
            "error": self.error,
            "alpha": self.alpha,
            "target": self.target,
            "settings": self.settings(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the integral, the last error, the last step's α and an anchored target.

        Raises:
            ValueError: the saved settings, or a configured fixed target, differ from this run's.
        """
        check_resumed_settings("EntroPIC", self.settings(), self.target, state)
        self.integral = float(state["integral"])
        self.error = None if state.get("error") is None else float(state["error"])
        self.alpha = float(state["alpha"])
        if state.get("target") is not None:
            self.target = float(state["target"])


def entropic_token_weights(
    logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *, alpha: float, threshold: float
) -> torch.Tensor:
    """EntroPIC's per-token weights of the policy loss, ``(B, T)``: ``1 + alpha · sign(A)`` on response
    tokens whose probability under the policy being updated exceeds ``threshold`` (the reference's
    ``log_prob > log(threshold)``), 1 on the other response tokens, 0 on padding.

    Args:
        logp: ``(B, T)`` log-probs of the sampled tokens under the policy being updated.
        advantages: ``(B, T)`` advantages (only their sign is read).
        mask: ``(B, T)`` 1 on response tokens.
        alpha: the controller's α for this update, in ``[−1, 1]``.
        threshold: the probability above which a token is reweighted, in ``[0, 1)``.
    """
    high = logp.detach() > torch.log(torch.tensor(threshold, dtype=logp.dtype))  # [B, T]
    weights = 1.0 + alpha * torch.sign(advantages) * high.to(logp.dtype)  # [B, T]
    return weights * mask.to(logp.dtype)


def _token_weights(inputs: TokenInputs) -> torch.Tensor:
    """The registry's ``token_weights``: :func:`entropic_token_weights` with this update's α."""
    if "entropic_alpha" not in inputs.step:
        raise ValueError(
            "EntroPIC's token weights need the controller's α of this update (entropic_alpha from its run "
            "state): set entropic=true (or method=entropic)"
        )
    return entropic_token_weights(
        inputs.logp,
        inputs.advantages,
        inputs.mask,
        alpha=float(inputs.step["entropic_alpha"]),
        threshold=float(inputs.settings["entropic_threshold"]),
    )


def _state(values: Mapping[str, Any]) -> EntroPICController | None:
    """The controller of the resolved settings (None when the control is off)."""
    fields = {
        "kp": "entropic_kp",
        "ki": "entropic_ki",
        "threshold": "entropic_threshold",
        "target": "entropic_target",
        "target_ratio": "entropic_target_ratio",
    }
    return state_from_settings(EntroPICController, values, "entropic", fields)


_ENTROPIC_KEYS = (
    "entropic_kp",
    "entropic_ki",
    "entropic_threshold",
    "entropic_target",
    "entropic_target_ratio",
)


def _problems(values: Mapping[str, Any]) -> list[str]:
    problems = switched_problems(values, "entropic", _ENTROPIC_KEYS, "EntroPIC")
    if values["entropic_target"] is not None and stray_settings(values, ("entropic_target_ratio",)):
        problems.append(
            "{p}entropic_target_ratio applies only with {p}entropic_target null (the target anchored at "
            f"ratio × H_0), but entropic_target={values['entropic_target']} nats: set one of the two"
        )
    return problems


ENTROPIC = register_entropy_control(
    EntropyControl(
        "entropic",
        f"{_SOURCE}: PI control of entropy through the weights of high-probability tokens",
        {
            "entropic": True,
            "entropic_kp": 1.0,
            "entropic_ki": 0.01,
            "entropic_threshold": 0.95,
            "entropic_target_ratio": 1.0,
        },
        "on tokens whose probability exceeds entropic_threshold the policy loss is weighted 1 + α for "
        "positive and 1 − α for negative advantages, α = clip(Kp·e + Ki·I, −1, 1) from the error e = H_t − "
        "target of this step's rollout entropy and I, the sum of the errors before it (applied in the same "
        "step); the target is entropic_target nats, or entropic_target_ratio × H_0 when entropic_target is "
        "unset",
        make_state=_state,
        token_weights=_token_weights,
        switch="entropic",
        problems=_problems,
        metrics=tuple(ENTROPIC_METRICS.values()),
        actuators=("entropic/alpha",),
        panels=(
            (ENTROPIC_METRICS["alpha"], "EntroPIC α (applied)"),
            (ENTROPIC_METRICS["integral"], "EntroPIC integral I"),
        ),
        label="EntroPIC",
        declares=(
            Setting(
                "entropic",
                bool,
                "EntroPIC: a PI controller on the rollout entropy H_t sets α each step, and the policy loss of "
                "tokens above entropic_threshold is weighted 1 + α (A > 0) or 1 − α (A < 0) (the entropic "
                "preset: true). Both engines: eapo.core.controls.entropic.",
                ANY_OF_TYPE,
                default=False,
                citation=_SOURCE,
            ),
            Setting(
                "entropic_kp",
                float,
                "EntroPIC: the proportional gain Kp on the entropy error H_t − target.",
                at_least(0),
                default=1.0,
                citation=_REFERENCE,
            ),
            Setting(
                "entropic_ki",
                float,
                "EntroPIC: the integral gain Ki on the sum of past entropy errors.",
                at_least(0),
                default=0.01,
                citation=_REFERENCE,
            ),
            Setting(
                "entropic_threshold",
                float,
                "EntroPIC: only tokens whose probability under the updated policy exceeds this are reweighted "
                "(0: every token).",
                between(0, 1, high_open=True),
                default=0.95,
                citation=_REFERENCE,
            ),
            Setting(
                "entropic_target",
                float,
                "EntroPIC's target entropy in nats per token; null: entropic_target_ratio × H_0, the run's own "
                "first-step rollout entropy (the reference's 0.1 nats is for math RL with Qwen3-8B).",
                at_least(0),
                default=None,
                citation=_SOURCE,
            ),
            Setting(
                "entropic_target_ratio",
                float,
                "EntroPIC with entropic_target null: target = entropic_target_ratio × H_0 (1.0: hold the "
                "starting entropy).",
                above(0),
                default=1.0,
                citation="eapo's H_0 anchor",
            ),
        ),
    )
)
