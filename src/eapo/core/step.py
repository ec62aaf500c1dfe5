"""One owner for EAPO's per-step decision, shared by the TRL trainer and the verl plugin.

A training step of any polarity weighting scheme is, given the step's rewards (one per rollout, NaN
where no reward could score it), the group id of each rollout and the rollout entropy ``H_t``:

1. group statistics over the *scored* rollouts of each group (groups may differ in size and need
   not be contiguous, as verl's ``index``): :func:`grouped_advantages`;
2. the polarity split ``D+ = {i : r_i >= centre}`` at the group mean (the paper) or median:
   :func:`polarity_split`;
3. ``(w+, w-)`` from the weighting scheme and the weighted advantages ``Â = w±·A``;
4. ``H_0`` / the first step's entropy, the metrics under :data:`METRIC_KEYS`, and one serialisable
   state (:meth:`EAPOStep.state_dict`) that both engines write to :data:`STATE_FILE` in their
   checkpoints.

**Unscorable rollouts (one rule, both engines).** A rollout whose reward is NaN gets advantage 0,
is left out of its group's mean and std, counts as positive (its advantage is 0 either way) and is
left out of ``eapo/frac_positive``; ``eapo/num_unscored`` counts it. A group with fewer than two
scored rollouts has nothing to contrast: advantage 0, positive.

This module is pure maths and plain data: the engines move tensors in and out and write the state
dict to disk themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch

from eapo.core.advantages import QUANTILE_METHODS
from eapo.core.entropy import ENTROPY_AGGREGATIONS
from eapo.core.settings import Setting, between, one_of, settings_by_name

__all__ = [
    "STEP_SETTINGS",
    "ADVANTAGE_EPS",
    "STATE_FILE",
    "METRIC_KEYS",
    "group_rows",
    "contiguous_index",
    "combined_rewards",
    "polarity_split",
    "grouped_advantages",
    "grouped_polarity_advantages",
    "polarity_metrics",
    "split_metrics",
    "step_problems",
    "EAPOStep",
]

#: The step's own settings, declared once (every other view is derived: :mod:`eapo.core.settings`).
STEP_SETTINGS: dict[str, Setting] = settings_by_name(
    [
        Setting(
            "split_by",
            str,
            "Polarity split: rollouts at or above the group 'mean' (the paper) or 'median' are D+; 'quantile' "
            "(QAE): the group's quantile_k-quantile is both the advantage baseline (A = (r − Q_K)/(σ + ε)) and "
            "the split, so every reward at the quantile gets advantage 0.",
            one_of("mean", "median", "quantile"),
            default="mean",
            citation="EAPO paper, Section 2.2; median and quantile: its Limitations section; QAE (arXiv 2509.22611)",
        ),
        Setting(
            "quantile_k",
            float,
            "split_by=quantile: K of the group's K-quantile baseline (read as quantile_method). With binary "
            "rewards and success rate p, prompts with p <= 1 − K move only their successes, the others only "
            "their failures (exactly so under inverse_cdf; linear interpolates where K·(G − 1) falls between a "
            "failure and a success).",
            between(0, 1),
            default=0.4,
            citation="QAE, Wu et al. 2025 (arXiv 2509.22611): K = 0.4",
        ),
        Setting(
            "quantile_method",
            str,
            "split_by=quantile: how the group's K-quantile is read off its rewards. linear (QAE's reference "
            "code, torch.quantile): the sorted rewards interpolated at position K·(G − 1); inverse_cdf: the "
            "smallest reward x with #{r <= x}/G >= K, always a reward of the group. They differ where the "
            "position falls between two different rewards (G = 4, K = 0.4, binary rewards with p = 0.5: "
            "0.2 against 0).",
            one_of(*QUANTILE_METHODS),
            default="linear",
            citation="QAE, Wu et al. 2025 (arXiv 2509.22611); its code's torch.quantile",
        ),
        Setting(
            "entropy_agg",
            str,
            "How H_t averages per-token entropies: token-mean (every completion token weighs the same) or "
            "seq-mean-token-mean (every rollout weighs the same); the same definition on TRL and verl.",
            one_of(*ENTROPY_AGGREGATIONS),
            default="token-mean",
            citation="eapo's definition of the paper's rollout entropy",
        ),
    ]
)

#: The epsilon added to the group std, the same on both engines (verl's default; TRL 1.16's own is 1e-4).
ADVANTAGE_EPS = 1e-6

#: The file both engines write the step's state to, in every checkpoint folder.
STATE_FILE = "eapo_state.json"

#: The metric keys of the step (the contract both engines log under).
METRIC_KEYS: tuple[str, ...] = (
    "entropy/rollout",
    "eapo/H0",
    "eapo/w_pos",
    "eapo/w_neg",
    "eapo/frac_positive",
    "eapo/num_unscored",
)


def step_problems(values: Mapping[str, Any], prefix: str, scheme: str | None = None) -> list[str]:
    """The step's settings' rule between them (one declaration for every view): ``quantile_k`` or
    ``quantile_method`` set to other than its default applies only with ``split_by=quantile`` (or a
    ``scheme`` that splits there, qae)."""
    from eapo.core.weighting import WEIGHTING_SCHEMES

    implied = WEIGHTING_SCHEMES[scheme].split_by if scheme is not None else None
    split = implied or values.get("split_by") or "mean"
    if split == "quantile":
        return []
    defaults = STEP_SETTINGS
    return [
        f"{prefix}{key}={values[key]} applies only with {prefix}split_by=quantile (QAE); split_by is {split}"
        for key in ("quantile_k", "quantile_method")
        if values.get(key) is not None and values[key] != defaults[key].default
    ][:1]


# ---------------------------------------------------------------------------------------------
# Groups by index, NaN-tolerant
# ---------------------------------------------------------------------------------------------


def group_rows(index: Sequence[Any]) -> list[list[int]]:
    """Row indices of each group (rows with equal ``index`` values), groups in order of first appearance."""
    rows: dict[Any, list[int]] = defaultdict(list)
    for row, group_id in enumerate(index):
        rows[group_id].append(row)
    return list(rows.values())


def contiguous_index(num_rows: int, group_size: int) -> list[int]:
    """The ``index`` of a batch whose groups are ``group_size`` contiguous rows (TRL's layout)."""
    return [row // group_size for row in range(num_rows)]


def combined_rewards(per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The scalar reward of each rollout, ``(B,)`` float64, from ``(B, F)`` per-function rewards (NaN: that
    function could not score it) and ``(F,)`` weights: the weighted sum over the functions that scored it,
    or NaN when none did (the rollout is unscored: out of its group's statistics, advantage 0). TRL 1.16's
    ``sum_then_normalize`` reward is this sum; verl hands core one score per rollout (``F`` = 1)."""
    if per_func.dim() != 2 or weights.shape != (per_func.shape[1],):
        raise ValueError(
            f"per-function rewards must be (B, F) with (F,) weights; got {tuple(per_func.shape)} and "
            f"{tuple(weights.shape)}"
        )
    per_func = per_func.to(torch.float64)
    total = (per_func * weights.to(per_func.device, torch.float64).unsqueeze(0)).nansum(dim=1)  # [B]
    return torch.where(torch.isnan(per_func).all(dim=1), torch.nan, total)


def _check(scores: torch.Tensor, index: Sequence[Any]) -> torch.Tensor:
    if scores.dim() != 1 or len(index) != scores.shape[0]:
        raise ValueError(
            f"scores must be (B,) with one index per row; got {tuple(scores.shape)} and {len(index)} ids"
        )
    return ~torch.isnan(scores)


def _scored_groups(scores: torch.Tensor, index: Sequence[Any]) -> Iterator[tuple[int, torch.Tensor]]:
    """``(size, rows)`` for each set of groups with ``size >= 2`` scored rows: ``rows`` lists their
    scored rows group after group (``size`` contiguous entries per group), so the maths of
    :mod:`eapo.core` for contiguous groups applies to it."""
    scored = ~torch.isnan(scores)
    by_size: dict[int, list[int]] = defaultdict(list)
    for rows in group_rows(index):
        kept = [row for row in rows if bool(scored[row])]
        by_size[len(kept)].extend(kept)
    for size, rows in by_size.items():
        if size >= 2:  # fewer: nothing to contrast with (advantage 0, positive)
            yield size, torch.tensor(rows, dtype=torch.long, device=scores.device)


def polarity_split(
    scores: torch.Tensor,
    index: Sequence[Any],
    *,
    by: Literal["mean", "median", "quantile"] = "mean",
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positive, scored)``, both ``(B,)`` bool: ``r_i >= centre`` of the scored rows of its group.

    Unscored (NaN) rows and groups with fewer than two scored rows are positive.
    """
    from eapo.core.advantages import positive_mask

    scored = _check(scores, index)
    positive = torch.ones(scores.shape[0], dtype=torch.bool, device=scores.device)
    for size, order in _scored_groups(scores, index):
        positive[order] = positive_mask(
            scores[order], size, by=by, quantile_k=quantile_k, quantile_method=quantile_method
        ).to(positive.device)
    return positive, scored


def grouped_advantages(
    scores: torch.Tensor,
    index: Sequence[Any],
    *,
    scale: Literal["group", "batch", "none"] = "group",
    eps: float = 1e-6,
    centre: Literal["mean", "quantile"] = "mean",
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> torch.Tensor:
    """Group-relative advantages ``(B,)`` over the scored rows of each group (0 for unscored rows and
    for groups with fewer than two scored rows): centred on the group mean (or QAE's ``quantile_k``-quantile
    read as ``quantile_method``, ``centre="quantile"``: :func:`eapo.core.advantages.group_quantile`) and divided by the group's
    std + ``eps`` (``group``), by the std of every scored reward of the batch + ``eps`` (``batch``,
    TRL's ``scale_rewards="batch"``) or not at all (``none``)."""
    from eapo.core.advantages import group_advantages

    scored = _check(scores, index)
    dtype = scores.dtype if scores.dtype.is_floating_point else torch.float32
    advantages = torch.zeros(scores.shape[0], dtype=dtype, device=scores.device)
    by_group = "none" if scale == "batch" else scale
    for size, order in _scored_groups(scores, index):
        advantages[order] = group_advantages(
            scores[order],
            size,
            scale=by_group,
            eps=eps,
            centre=centre,
            quantile_k=quantile_k,
            quantile_method=quantile_method,
        ).to(dtype)
    if scale == "batch":  # centred in the group, scaled by the std of every scored reward of the batch
        values = scores[scored].detach().to(torch.float64)
        batch_std = values.std() if values.numel() > 1 else torch.zeros((), dtype=torch.float64)
        advantages = torch.where(
            advantages == 0, advantages, (advantages.to(torch.float64) / (batch_std + eps)).to(dtype)
        )
    return advantages


def grouped_polarity_advantages(
    scores: torch.Tensor,
    index: Sequence[Any],
    w_pos: float,
    w_neg: float,
    *,
    scale: Literal["group", "batch", "none"] = "group",
    by: Literal["mean", "median", "quantile"] = "mean",
    eps: float = 1e-6,
    quantile_k: float = 0.4,
    quantile_method: str = "linear",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(weighted advantages, positive, scored)``, each ``(B,)``: :func:`grouped_advantages` weighted
    ``w_pos`` on D+ and ``w_neg`` on D- (:func:`polarity_split`). ``by="quantile"`` (QAE) centres the
    advantages on the group's ``quantile_k``-quantile (read as ``quantile_method``) too; ``mean`` and ``median`` centre them on the mean
    (the median moves only the split)."""
    from eapo.core.advantages import weight_advantages

    centre = "quantile" if by == "quantile" else "mean"
    quantile = {"quantile_k": quantile_k, "quantile_method": quantile_method}
    advantages = grouped_advantages(scores, index, scale=scale, eps=eps, centre=centre, **quantile)
    positive, scored = polarity_split(scores, index, by=by, **quantile)
    return weight_advantages(advantages, positive, w_pos, w_neg), positive, scored


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def polarity_metrics(num_positive: int, num_scored: int, num_unscored: int) -> dict[str, float]:
    """``eapo/frac_positive`` (|D+| among scored rollouts; NaN with none scored) and ``eapo/num_unscored``."""
    return {
        "eapo/frac_positive": num_positive / num_scored if num_scored else float("nan"),
        "eapo/num_unscored": float(num_unscored),
    }


def split_metrics(positive: torch.Tensor, scored: torch.Tensor) -> dict[str, float]:
    """:func:`polarity_metrics` of the output of :func:`polarity_split`."""
    scored = scored.to(torch.bool)
    return polarity_metrics(
        int((positive.to(scored.device) & scored).sum()), int(scored.sum()), int((~scored).sum())
    )


# ---------------------------------------------------------------------------------------------
# The step's owner: weights, H_0, metrics, state
# ---------------------------------------------------------------------------------------------


class EAPOStep:
    """The per-step decision of one run: a weighting scheme, its polarity split and the step's state.

    Engines build it from the run's resolved :class:`eapo.core.Algorithm` (:meth:`~eapo.core.Algorithm.make_step`),
    which has validated every setting; the constructor trusts its arguments.

    Args:
        weighting: a :class:`eapo.core.WeightingScheme` (``eapo.core.make_weighting``).
        method: the name recorded in (and checked against) the checkpointed state; default the
            scheme's name (the verl plugin passes ``algorithm.eapo.method``, e.g. an entropy-control
            preset that runs the ``grpo`` scheme).
        split_by: ``"mean"`` (the paper), ``"median"`` or ``"quantile"`` (QAE); None: the scheme's own
            split where it has one (``qae``: the quantile), else the mean.
        quantile_k: with ``split_by="quantile"``, K (None: QAE's 0.4).
        quantile_method: with ``split_by="quantile"``, how the K-quantile is read
            (:data:`STEP_SETTINGS`; None: ``linear``, the reference's).
        controls: the run's entropy controls that keep state, by name (see :attr:`controls`).
    """

    def __init__(
        self,
        weighting: Any,
        *,
        method: str | None = None,
        split_by: str | None = None,
        quantile_k: float | None = None,
        quantile_method: str | None = None,
        controls: Mapping[str, Any] | None = None,
    ) -> None:
        # a scheme with its own split (qae) splits there; the settings were validated where the run's
        # eapo.core.Algorithm was resolved (Algorithm.make_step builds this), not again here
        split_by = getattr(weighting, "split_by", None) or split_by or "mean"
        default_k = STEP_SETTINGS["quantile_k"].default
        #: K of the quantile split (QAE), used with ``split_by="quantile"``.
        self.quantile_k = default_k if quantile_k is None else float(quantile_k)
        #: how the K-quantile is read (:func:`eapo.core.advantages.group_quantile`), with ``split_by="quantile"``.
        self.quantile_method: str = quantile_method or STEP_SETTINGS["quantile_method"].default
        #: name -> the control's run state (``anchor(h0)``, ``state_dict()``, ``load_state_dict()``, e.g.
        #: :class:`eapo.core.AdaptiveEntropyCoef`): anchored on the first step's entropy, saved with the step.
        self.controls: dict[str, Any] = dict(controls or {})
        self.weighting = weighting
        self.method = method if method is not None else getattr(weighting, "name", None)
        self.split_by = split_by
        #: ``H`` of the first step with an entropy: ``eapo/H0`` for schemes without their own anchor.
        self.first_entropy: float | None = None
        #: the metrics the control states reported at the last :meth:`control_inputs` (logged by the engines)
        self.control_metrics: dict[str, float] = {}
        #: ``(positive, scored)`` of the last :meth:`step` (``[B]`` bool each): each rollout's polarity
        self.last_split: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def h0(self) -> float | None:
        """The anchor logged as ``eapo/H0``: the scheme's ``H_0`` (``eapo``), else the first step's ``H``."""
        h0 = getattr(self.weighting, "h0", None)
        return h0 if h0 is not None else self.first_entropy

    def weights(self, entropy: float | None) -> tuple[float, float]:
        """This step's ``(w+, w-)`` from ``H_t`` (advances the scheme; records the first ``H``)."""
        w_pos, w_neg = self.weighting.weights(entropy)
        if self.first_entropy is None and entropy is not None:
            self.first_entropy = float(entropy)
            for control in self.controls.values():  # a target of ratio × H_0 is fixed now
                control.anchor(self.first_entropy)
        return w_pos, w_neg

    def weight_metrics(self, entropy: float | None, w_pos: float, w_neg: float) -> dict[str, float]:
        """``entropy/rollout`` (with an entropy), ``eapo/H0`` (once known), ``eapo/w_pos``, ``eapo/w_neg``, and
        the scheme's own (``eapo/integral`` with EAPO's integral term)."""
        metrics: dict[str, float] = {}
        if entropy is not None:
            metrics["entropy/rollout"] = float(entropy)
        if self.h0 is not None:
            metrics["eapo/H0"] = self.h0
        metrics["eapo/w_pos"] = w_pos
        metrics["eapo/w_neg"] = w_neg
        scheme_metrics = getattr(self.weighting, "metrics", None)  # the integral term's eapo/integral
        if scheme_metrics is not None:
            metrics.update(scheme_metrics())
        return metrics

    def step(
        self,
        scores: torch.Tensor,
        index: Sequence[Any],
        entropy: float | None,
        *,
        scale: Literal["group", "batch", "none"] = "group",
        eps: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The whole step: ``(weighted advantages (B,), metrics)`` from rewards, groups and ``H_t``
        (``eps``: added to the std; None: :data:`ADVANTAGE_EPS`)."""
        eps = ADVANTAGE_EPS if eps is None else eps
        w_pos, w_neg = self.weights(entropy)
        advantages, positive, scored = grouped_polarity_advantages(
            scores,
            index,
            w_pos,
            w_neg,
            scale=scale,
            by=self.split_by,
            eps=eps,  # type: ignore[arg-type]
            quantile_k=self.quantile_k,
            quantile_method=self.quantile_method,
        )
        # the split the step made, for an engine that logs each rollout's polarity (rollouts.jsonl)
        self.last_split = (positive, scored)
        return advantages, {**self.weight_metrics(entropy, w_pos, w_neg), **split_metrics(positive, scored)}

    def control_inputs(
        self, entropy: float | None, *, moved_by_engine: Collection[str] = ()
    ) -> dict[str, dict[str, float]]:
        """Each control state's inputs to this step's update, by control name, and the state moved by this
        step's ``H_t`` (``observe``), for the controls an engine lacks
        (:func:`eapo.core.controls.applied_by_eapo`). A state's inputs (``loss_inputs()``) come from the
        entropies up to step t−1 (taken before ``observe``: the adaptive coefficient), or, for a state whose
        ``observe_first`` is true, up to step t (taken after: EntroPIC's α, whose reference reads the
        update's own entropy; ``H_t`` is measured before the update on both engines). ``moved_by_engine``:
        the states the engine moves itself (TRL's adaptive coefficient), left alone. Call after
        :meth:`step` (which anchors the states at ``H_0``). A state with ``metrics()`` reports what it
        logs this step (after ``observe``) into :attr:`control_metrics`, which the engines log."""
        inputs: dict[str, dict[str, float]] = {}
        self.control_metrics = {}
        for name, state in self.controls.items():
            if name in moved_by_engine or not hasattr(state, "loss_inputs"):
                continue
            if entropy is None:
                raise ValueError(
                    f"the entropy control {name} moves with the rollout entropy H_t, but this step has none"
                )
            if getattr(state, "observe_first", False):  # inputs from the entropies up to this step
                state.observe(float(entropy))
                inputs[name] = dict(state.loss_inputs())
            else:  # inputs from the entropies up to the previous step
                inputs[name] = dict(state.loss_inputs())
                state.observe(float(entropy))
            if hasattr(state, "metrics"):  # what the control logs this step (its documented keys)
                self.control_metrics.update(state.metrics())
        return inputs

    # --- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The run's whole step state, one schema on both engines: ``method``, the scheme's
        ``weighting`` state (its ``H_0`` anchor), ``first_entropy`` and each control's state under
        ``controls`` (the adaptive coefficient and its target; an integral, when a control has one)."""
        return {
            "method": self.method,
            "weighting": self.weighting.state_dict(),
            "first_entropy": self.first_entropy,
            "controls": {name: control.state_dict() for name, control in self.controls.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> list[str]:
        """Restore from :meth:`state_dict`. Returns the names of this run's controls the state has none
        for (they start afresh; the engine says so).

        Raises:
            ValueError: the state lacks one of :meth:`state_dict`'s keys, or was written for another
                method, other settings, or with a control this run does not have.
        """
        missing = [key for key in ("method", "weighting", "first_entropy", "controls") if key not in state]
        if missing:
            raise ValueError(
                f"the state has no {', '.join(missing)}: it was not written by EAPOStep.state_dict "
                "(method, weighting, first_entropy, controls)"
            )
        saved = state["method"]
        if saved is not None and self.method is not None and saved != self.method:
            raise ValueError(
                f"the state was written by method {saved}, but this run uses {self.method}; "
                "resume with the same algorithm settings"
            )
        self.weighting.load_state_dict(state["weighting"])
        first = state["first_entropy"]
        self.first_entropy = None if first is None else float(first)
        controls = dict(state["controls"])
        unexpected = sorted(set(controls) - set(self.controls))
        if unexpected:
            raise ValueError(
                f"the state was written with the entropy control {unexpected[0]}, which this run does not have; "
                "resume with the same algorithm settings"
            )
        for name, control in self.controls.items():
            if name in controls:
                control.load_state_dict(controls[name])
            if self.first_entropy is not None:  # a control that starts afresh anchors on the saved H
                control.anchor(self.first_entropy)
        return [name for name in self.controls if name not in controls]
