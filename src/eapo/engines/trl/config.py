"""``EAPOConfig``: TRL's ``GRPOConfig`` whose defaults are the EAPO paper's objective, plus the weighting.

Swapping TRL's two names is the whole change to a TRL script::

    from eapo import EAPOConfig, EAPOTrainer            # was: from trl import GRPOConfig, GRPOTrainer

    trainer = EAPOTrainer(model=..., reward_funcs=..., args=EAPOConfig(output_dir="out"), train_dataset=...)

TRL 1.16's ``GRPOConfig`` defaults to DAPO's token-level loss without a KL term (``loss_type="dapo"``,
``beta=0.0``, ``use_bias_correction_kl=True``, ``num_generations=8``). This class changes the defaults to
the paper's objective (Eq. ``grpo`` of the EAPO paper, Section 5.1):

========================== ========= ==================================================================
field                      default   meaning
========================== ========= ==================================================================
``loss_type``              grpo      each rollout's token losses averaged over its own length (1/|y_i|)
``beta``                   0.001     k3 KL to a frozen reference model
``use_bias_correction_kl`` False     the plain k3 estimator (TRL's True multiplies it by the ratio)
``epsilon``                0.2       PPO clip range
``num_generations``        4         rollouts per prompt N
``scale_rewards``          group     advantages normalised by the group's std
========================== ========= ==================================================================

and carries the polarity weighting (``method``, ``w_pos``, ``w_neg``, ``w0``, ``w_min``, ``w_max``,
``anchor_steps``, ``split_by``, ``entropy_agg``), from which :class:`eapo.engines.trl.trainer.EAPOTrainer` builds its
:class:`eapo.core.WeightingScheme` when no ``weighting=`` is passed.

Not to be confused with :class:`eapo.config.RunConfig`, the typed YAML tree of ``eapo train`` (sections
``model``, ``data``, ``rollout``, ...). ``eapo train`` translates that tree into this class
(:func:`eapo.engines.trl.args.grpo_args`), so the command line and a TRL script train through the same arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

from eapo.core import ENTROPY_AGGREGATIONS, WEIGHTING_SCHEMES, WeightingScheme, make_weighting

#: The weighting fields of :class:`EAPOConfig`, each passed to :func:`eapo.core.make_weighting` when set.
WEIGHTING_KEYS: tuple[str, ...] = ("w_pos", "w_neg", "w0", "w_min", "w_max", "anchor_steps")


@dataclass
class EAPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` with the EAPO paper's objective as defaults and the polarity weighting settings.

    Every ``GRPOConfig`` / ``TrainingArguments`` field is accepted as usual; only the defaults of
    ``loss_type``, ``beta``, ``use_bias_correction_kl``, ``epsilon``, ``num_generations`` and
    ``scale_rewards`` differ from TRL's (see the module docstring). The weighting settings are validated
    once, in ``__post_init__``, with errors that list the valid values.
    """

    # --- the paper's objective (TRL's defaults overridden) ---------------------------------------------
    loss_type: str = field(
        default="grpo",
        metadata={
            "help": "TRL's loss aggregation. 'grpo' (EAPO's default, the paper's Eq. grpo): each rollout's token "
            "losses are averaged over its own length, 1/|y_i|. TRL's own default is 'dapo'."
        },
    )
    beta: float = field(
        default=0.001,
        metadata={
            "help": "KL coefficient to the frozen reference model (the paper: 0.001; TRL's default 0.0)."
        },
    )
    use_bias_correction_kl: bool = field(
        default=False,
        metadata={
            "help": "Multiply the k3 KL term by the importance ratio (TRL's default True). False (EAPO's default) is "
            "the paper's plain k3 estimator and verl's low_var_kl."
        },
    )
    epsilon: float = field(default=0.2, metadata={"help": "PPO clip range ε (the paper: 0.2)."})
    num_generations: int | None = field(
        default=4, metadata={"help": "Rollouts per prompt N (the paper: 4; TRL's default 8)."}
    )
    scale_rewards: str = field(
        default="group",
        metadata={"help": "Advantage scaling: 'group' (GRPO, the paper), 'batch' or 'none'."},
    )

    # --- the polarity weighting (eapo.core.make_weighting) ---------------------------------------------
    method: str = field(
        default="eapo",
        metadata={
            "help": "Weighting scheme: grpo (1, 1), psr (1, 0), nsr (0, 1), w_reinforce (0.1, 1) or eapo."
        },
    )
    w_pos: float | None = field(
        default=None, metadata={"help": "Fixed positive weight w+ (fixed schemes; default: the scheme's)."}
    )
    w_neg: float | None = field(
        default=None,
        metadata={"help": "Negative weight w- (every scheme; default: the scheme's, 1 for eapo)."},
    )
    w0: float | None = field(default=None, metadata={"help": "EAPO base positive weight w0 (default 0.2)."})
    w_min: float | None = field(default=None, metadata={"help": "EAPO lower clip of w+ (default 0)."})
    w_max: float | None = field(default=None, metadata={"help": "EAPO upper clip of w+ (default 2)."})
    anchor_steps: int | None = field(
        default=None, metadata={"help": "EAPO: steps averaged into H_0 (default 1, the paper)."}
    )
    split_by: str = field(
        default="mean",
        metadata={
            "help": "Polarity split: rollouts at or above the group 'mean' (the paper) or 'median' are D+."
        },
    )
    entropy_agg: str = field(
        default="token-mean",
        metadata={
            "help": "How H_t averages per-token entropies: token-mean (every completion token weighs the same) or "
            "seq-mean-token-mean (every rollout does)."
        },
    )

    def __post_init__(self) -> None:
        if self.method not in WEIGHTING_SCHEMES:
            raise ValueError(
                f"EAPOConfig.method={self.method!r} is unknown; valid: {', '.join(WEIGHTING_SCHEMES)}"
            )
        accepted = WEIGHTING_SCHEMES[self.method][1]
        for key in WEIGHTING_KEYS:
            if getattr(self, key) is not None and key not in accepted:
                raise ValueError(
                    f"EAPOConfig.{key} does not apply to method {self.method!r}; it accepts {', '.join(accepted)}"
                )
        if self.split_by not in ("mean", "median"):
            raise ValueError(f"EAPOConfig.split_by={self.split_by!r} is invalid; valid: mean, median")
        if self.entropy_agg not in ENTROPY_AGGREGATIONS:
            raise ValueError(
                f"EAPOConfig.entropy_agg={self.entropy_agg!r} is invalid; valid: {', '.join(ENTROPY_AGGREGATIONS)}"
            )
        super().__post_init__()

    def weighting_overrides(self) -> dict[str, Any]:
        """The weighting fields that are set, as :func:`eapo.core.make_weighting` takes them."""
        return {key: getattr(self, key) for key in WEIGHTING_KEYS if getattr(self, key) is not None}

    def make_weighting(self) -> WeightingScheme:
        """A fresh weighting scheme for these settings (``make_weighting(method, **overrides)``)."""
        return make_weighting(self.method, **self.weighting_overrides())


#: What makes TRL's objective the paper's: field -> the paper's value (tested against configs/paper_rjua.yaml).
PAPER_OBJECTIVE: dict[str, Any] = {
    "loss_type": "grpo",
    "beta": 0.001,
    "use_bias_correction_kl": False,
    "epsilon": 0.2,
    "num_generations": 4,
    "scale_rewards": "group",
}
