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

So that a TRL script generates as ``eapo train`` does with its defaults, ``max_completion_length`` is
2048 (TRL: 512) and ``vllm_importance_sampling_mode`` is ``token_truncate`` (TRL: ``sequence_mask``), read
from the defaults of ``rollout.max_completion_tokens`` and ``rollout.vllm_importance_correction``
(:class:`eapo.config.rollout.RolloutConfig`).

The class carries the polarity weighting (``method``, ``w_pos``, ``w_neg``, ``w0``, ``w_min``, ``w_max``,
``anchor_steps``, ``split_by``, ``quantile_k``, ``quantile_method``, ``entropy_agg``: fields derived from
:mod:`eapo.core`'s declarations, not copied), resolved in ``__post_init__`` (``EAPOConfig().w0`` reads 0.2,
the value the run uses; a weight the method does not take stays None), from which
:class:`eapo.engines.trl.trainer.EAPOTrainer` builds its :class:`eapo.core.WeightingScheme` when no
``weighting=`` is passed.

Not to be confused with :class:`eapo.config.RunConfig`, the typed YAML tree of ``eapo train`` (sections
``model``, ``data``, ``rollout``, ...). ``eapo train`` translates that tree into this class
(:func:`eapo.engines.trl.args.grpo_args`), so the command line and a TRL script train through the same arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from eapo.config.rollout import RolloutConfig
from eapo.core import (
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    WEIGHTING_SCHEMES,
    Setting,
    WeightingScheme,
    check_weights,
    make_weighting,
    scheme_defaults,
)
from eapo.core.settings import derive_fields
from eapo.core.step import step_problems
from eapo.runtime.stop import check_stops

#: ``eapo train``'s rollout defaults (:class:`eapo.config.rollout.RolloutConfig`), which this class's TRL
#: fields of the same meaning take, so a TRL script and the command line generate alike.
_ROLLOUT_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RolloutConfig)}


def _trl_field(spec: Setting, nullable: bool) -> Any:
    """TRL's (HfArgumentParser's) view of a setting eapo.core declares: its help and, unless nullable, default."""
    default = None if nullable else spec.default
    return field(default=default, metadata={"help": spec.doc})


@dataclass
@derive_fields("method", STEP_SETTINGS.values(), lambda spec: _trl_field(spec, False), nullable=False)
@derive_fields("method", WEIGHT_SETTINGS.values(), lambda spec: _trl_field(spec, True))
class EAPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` with the EAPO paper's objective as defaults and the polarity weighting settings.

    Every ``GRPOConfig`` / ``TrainingArguments`` field is accepted as usual; only the defaults of
    ``loss_type``, ``beta``, ``use_bias_correction_kl``, ``epsilon``, ``num_generations``,
    ``scale_rewards``, ``max_completion_length`` and ``vllm_importance_sampling_mode`` differ from TRL's
    (see the module docstring), and ``bf16`` left unset follows
    the hardware (on only with a bf16-capable GPU; TRL would turn it on everywhere and stop on a
    laptop). The weighting settings are validated once, in ``__post_init__``, against their
    declarations in :mod:`eapo.core`, with errors that name the field and list the valid values.
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

    # --- the polarity weighting (eapo.core.make_weighting); its weights, split_by and entropy_agg are
    # derived from eapo.core's declarations by the decorators above ------------------------------------
    method: str = field(
        default="eapo",
        metadata={
            "help": "Weighting scheme: a name in eapo.core.WEIGHTING_SCHEMES (its weights: scheme_defaults)."
        },
    )

    # --- rollouts (eapo train's defaults where TRL's differ) ------------------------------------------------
    max_completion_length: int | None = field(
        default=_ROLLOUT_DEFAULTS["max_completion_tokens"],
        metadata={
            "help": "Maximum completion length in tokens (the paper and eapo train's rollout.max_completion_tokens: "
            "2048; TRL's default 512)."
        },
    )
    vllm_importance_sampling_mode: str = field(
        default=_ROLLOUT_DEFAULTS["vllm_importance_correction"],
        metadata={
            "help": "With vLLM rollouts, how the loss corrects for vLLM's log-probs differing from the trainer's: "
            "token_truncate (eapo train's rollout.vllm_importance_correction: each token's ratio capped at "
            "vllm_importance_sampling_clip_max), token_mask, sequence_truncate or sequence_mask (TRL's default: "
            "a row over the cap is zeroed yet still counts in 1/N)."
        },
    )
    vllm_importance_sampling_clip_max: float | None = field(
        default=_ROLLOUT_DEFAULTS["vllm_importance_cap"],
        metadata={
            "help": "Upper bound C_max of the vLLM importance ratio (eapo train's rollout.vllm_importance_cap, "
            "3.0 as TRL's)."
        },
    )

    stop: list[str] | None = field(
        default=None,
        metadata={
            "help": "Stop strings: a rollout ends at the first one it writes, which stays in its text (vLLM's "
            "include_stop_str_in_output), on every backend (vLLM colocate or server, generate, continuous "
            "batching); e.g. ['</advice>']. The rule for a token that straddles the string: "
            "eapo.runtime.stop. None: no stop strings (the paper's setting)."
        },
    )

    log_rollouts: int = field(
        default=0,
        metadata={
            "help": "Every this many steps, append the step's rollouts to output_dir/rollouts.jsonl (prompt, "
            "completion, each reward, the total, the advantage, the polarity, the weight, why it ended: "
            "eapo.run_dir.ROLLOUT_KEYS); 0: never. eapo train's logging.rollouts."
        },
    )

    def __post_init__(self) -> None:
        if (
            not isinstance(self.log_rollouts, int)
            or isinstance(self.log_rollouts, bool)
            or self.log_rollouts < 0
        ):
            raise ValueError(
                f"EAPOConfig.log_rollouts={self.log_rollouts!r}: an integer >= 0 (every this many steps; 0: never)"
            )
        self.stop = list(check_stops(self.stop, where="EAPOConfig.stop")) or None
        if self.stop and self.mask_truncated_completions:
            raise ValueError(
                "EAPOConfig.mask_truncated_completions=True with stop strings: TRL takes every completion that "
                "does not end in an EOS token for a truncated one, so the rollouts that ended at a stop string "
                "would be masked out of the loss; set mask_truncated_completions=False (the overlong reward "
                "penalises answers that run to the cap instead)"
            )
        if self.stop and self.use_vllm:
            # vLLM stops at the strings itself (colocated: TRL's SamplingParams; server: TRL's request)
            kwargs = dict(self.generation_kwargs or {})
            given = kwargs.get("stop")
            if given is not None and list(given) != self.stop:
                raise ValueError(
                    f"EAPOConfig.stop={self.stop!r} and generation_kwargs['stop']={given!r} disagree: give stop only"
                )
            kwargs.update(stop=self.stop, include_stop_str_in_output=True)
            self.generation_kwargs = kwargs
        if self.method not in WEIGHTING_SCHEMES:
            raise ValueError(
                f"EAPOConfig.method={self.method!r} is unknown; valid: {', '.join(WEIGHTING_SCHEMES)}"
            )
        weights = check_weights(
            self.method, self.method, {key: getattr(self, key) for key in WEIGHT_SETTINGS}, "EAPOConfig."
        )
        for key, value in {**scheme_defaults(self.method), **weights}.items():  # the resolved weighting
            setattr(self, key, value)
        for key, spec in STEP_SETTINGS.items():
            setattr(self, key, spec.check(getattr(self, key), "EAPOConfig."))
        problems = step_problems(
            {key: getattr(self, key) for key in ("split_by", "quantile_k", "quantile_method")},
            "EAPOConfig.",
            self.method,
        )
        if problems:
            raise ValueError(problems[0])
        if getattr(self, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
            raise ValueError(
                f"EAPOConfig.multi_objective_aggregation={self.multi_objective_aggregation!r}: EAPO's step splits "
                "each group at the mean of one summed reward per rollout (eapo.core.EAPOStep), so it needs "
                "'sum_then_normalize' (TRL's default)"
            )
        if self.bf16 is None:  # precision follows the hardware (TRL would ask for bf16 on any machine)
            self.bf16 = not self.fp16 and not self.use_cpu and _bf16_gpu_available()
        super().__post_init__()

    def weighting_overrides(self) -> dict[str, Any]:
        """The scheme's weights, resolved (the scheme's defaults where unset), as
        :func:`eapo.core.make_weighting` takes them."""
        accepted = WEIGHTING_SCHEMES[self.method][1]
        return {key: getattr(self, key) for key in accepted if getattr(self, key) is not None}

    def make_weighting(self) -> WeightingScheme:
        """A fresh weighting scheme for these settings (``make_weighting(method, **overrides)``)."""
        return make_weighting(self.method, **self.weighting_overrides())


def _bf16_gpu_available() -> bool:
    from transformers.utils import is_torch_bf16_gpu_available

    return is_torch_bf16_gpu_available()


#: What makes TRL's objective the paper's: field -> the paper's value (tested against configs/paper_rjua.yaml).
PAPER_OBJECTIVE: dict[str, Any] = {
    "loss_type": "grpo",
    "beta": 0.001,
    "use_bias_correction_kl": False,
    "epsilon": 0.2,
    "num_generations": 4,
    "scale_rewards": "group",
}
