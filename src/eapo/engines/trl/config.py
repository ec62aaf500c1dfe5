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

The class carries the whole algorithm: ``method`` (a weighting scheme or an entropy-control preset), the
weights, the step's settings and every entropy control, as fields derived from :mod:`eapo.core`'s
declarations (not copied) where TRL has no field of that meaning, and TRL's own fields where it has one
(``entropy_coef``, ``use_adaptive_entropy`` for ``adaptive_entropy``, ``epsilon_high``, ...: a TRL field at
TRL's default counts as unset, so a preset fills it). ``__post_init__`` resolves them once into
:attr:`EAPOConfig.algorithm`, an :class:`eapo.core.Algorithm`, and writes the resolved values back
(``EAPOConfig().w0`` reads 0.2, the value the run uses; a weight the method does not take stays None;
``EAPOConfig(method="entropy_bonus").entropy_coef`` reads 0.01). :class:`~eapo.engines.trl.trainer.EAPOTrainer`
builds its weighting, split and control states from that value. ``entropy_target`` defaults to None
(TRL: 0.2): the adaptive target anchored at ``entropy_target_ratio × H_0``, set a number to fix it.
``eapo train`` hands over its already-resolved value (:meth:`EAPOConfig.from_algorithm`), not validated again.

Not to be confused with :class:`eapo.config.RunConfig`, the typed YAML tree of ``eapo train`` (sections
``model``, ``data``, ``rollout``, ...). ``eapo train`` translates that tree into this class
(:func:`eapo.engines.trl.args.grpo_args`), so the command line and a TRL script train through the same arguments.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field, fields, replace
from typing import Any

from trl import GRPOConfig

from eapo.config.rollout import RolloutConfig
from eapo.core import (
    CONTROL_SETTINGS,
    ENTROPY_CONTROLS,
    OBJECTIVE_SETTINGS,
    STEP_SETTINGS,
    WEIGHT_SETTINGS,
    Algorithm,
    Setting,
    SettingError,
    WeightingScheme,
)
from eapo.core.algorithm import OBJECTIVE_TRL_FIELDS, method_setting
from eapo.core.controls import trl_control_args, trl_placeholder_fields
from eapo.core.settings import derive_fields
from eapo.runtime.stop import check_stops

#: ``eapo train``'s rollout defaults (:class:`eapo.config.rollout.RolloutConfig`), which this class's TRL
#: fields of the same meaning take, so a TRL script and the command line generate alike.
_ROLLOUT_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(RolloutConfig)}


def _trl_field(spec: Setting, nullable: bool) -> Any:
    """TRL's (HfArgumentParser's) view of a setting eapo.core declares: its help and, unless nullable, default."""
    default = None if nullable else spec.default
    return field(default=default, metadata={"help": spec.doc})


def _trl_named(name: str) -> str | None:
    """TRL's ``GRPOConfig`` field that holds the control setting ``name``, or None where TRL has none."""
    for control in ENTROPY_CONTROLS.values():
        target = control.trl_fields.get(name)
        if target is not None:
            return target if isinstance(target, str) else target[0]
    return None


#: The control settings TRL has no field for: EAPOConfig derives a field for each (None: unset).
_EAPO_CONTROL_FIELDS: tuple[Setting, ...] = tuple(
    spec for name, spec in CONTROL_SETTINGS.items() if _trl_named(name) is None
)

#: TRL's fields that a control's run state sets during the run (``trl_placeholders``: an H_0-anchored
#: target): EAPOConfig redeclares each with default None (unset), the help of the setting it holds.
_PLACEHOLDER_FIELDS: tuple[Setting, ...] = tuple(
    replace(CONTROL_SETTINGS[key], name=name) for name, (_, key, _) in trl_placeholder_fields().items()
)

#: The resolved value ``eapo train`` hands over (:meth:`EAPOConfig.from_algorithm`), read by ``__post_init__``.
_GIVEN: contextvars.ContextVar[Algorithm | None] = contextvars.ContextVar("eapo_algorithm", default=None)


@dataclass
@derive_fields("method", _PLACEHOLDER_FIELDS, lambda spec: _trl_field(spec, True))
@derive_fields("method", _EAPO_CONTROL_FIELDS, lambda spec: _trl_field(spec, True))
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
    method: str = field(default=method_setting().default, metadata={"help": method_setting().doc})

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
        given = _GIVEN.get()
        #: the run's algorithm, resolved once (eapo.core.Algorithm); the trainer builds from it
        self.algorithm: Algorithm = given if given is not None else self._resolve()
        self._hold(self.algorithm)
        if getattr(self, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
            raise ValueError(
                f"EAPOConfig.multi_objective_aggregation={self.multi_objective_aggregation!r}: EAPO's step splits "
                "each group at the mean of one summed reward per rollout (eapo.core.EAPOStep), so it needs "
                "'sum_then_normalize' (TRL's default)"
            )
        if self.bf16 is None:  # precision follows the hardware (TRL would ask for bf16 on any machine)
            self.bf16 = not self.fp16 and not self.use_cpu and _bf16_gpu_available()
        super().__post_init__()

    @classmethod
    def from_algorithm(cls, algorithm: Algorithm, **kwargs: Any) -> EAPOConfig:
        """An ``EAPOConfig`` holding ``algorithm`` (already resolved: not validated again) with TRL's other
        arguments ``kwargs``; the algorithm's fields are written from the value."""
        token = _GIVEN.set(algorithm)
        try:
            return cls(**kwargs)
        finally:
            _GIVEN.reset(token)

    def _resolve(self) -> Algorithm:
        """The algorithm from this config's fields (the one validation); errors name ``EAPOConfig.<key>``."""
        try:
            return Algorithm.resolve(self.method, _field_values(self), where="EAPOConfig.")
        except SettingError as error:
            raise ValueError(str(error)) from None

    def _hold(self, algorithm: Algorithm) -> None:
        """Write the resolved value into the fields: the method, the scheme's weights (None for the weights it
        does not take), the step's settings, every control (TRL's fields through their mapping) and the
        objective."""
        self.method = algorithm.method
        for key in WEIGHT_SETTINGS:
            setattr(self, key, algorithm.weights.get(key))
        for key, value in algorithm.step_settings().items():
            setattr(self, key, value)
        controls = algorithm.control_values()
        for spec in _EAPO_CONTROL_FIELDS:
            setattr(self, spec.name, controls[spec.name])
        # a field a run state sets stays None (anchored at ratio × H_0 by the trainer; TRL's field: the number)
        for key, value in trl_control_args(controls, placeholders=False).items():
            setattr(self, key, value)
        for key, value in algorithm.objective.items():
            setattr(self, OBJECTIVE_TRL_FIELDS.get(key, key), value)

    def make_weighting(self) -> WeightingScheme:
        """A fresh weighting scheme for these settings."""
        return self.algorithm.make_weighting()


def _field_values(args: Any) -> dict[str, Any]:
    """The algorithm's settings as TRL arguments hold them: eapo's own fields where present (an
    ``EAPOConfig``), TRL's fields of the controls where set to other than TRL's default (at the default:
    unset), and the objective's fields."""
    defaults = GRPOConfig.__dataclass_fields__
    values: dict[str, Any] = {key: getattr(args, key, None) for key in (*WEIGHT_SETTINGS, *STEP_SETTINGS)}
    for name in CONTROL_SETTINGS:
        trl_name = _trl_named(name)
        if trl_name is None:
            values[name] = getattr(args, name, None)
        elif getattr(args, trl_name) != defaults[trl_name].default:
            values[name] = getattr(args, trl_name)
    for name in OBJECTIVE_SETTINGS:
        values[name] = getattr(args, OBJECTIVE_TRL_FIELDS.get(name, name))
    return values


def algorithm_of(args: Any) -> Algorithm:
    """The algorithm TRL arguments train: an ``EAPOConfig``'s resolved value; for a plain ``GRPOConfig``, EAPO's
    weighting with the controls and objective set there (TRL's adaptive bonus keeps its numeric target)."""
    if isinstance(args, EAPOConfig):
        return args.algorithm
    values = _field_values(args)
    for name, (control, key, _) in trl_placeholder_fields().items():
        # while TRL runs the control's controller, the field's number is the setting's value
        if control.switch is not None and values.get(control.switch):
            values[key] = getattr(args, name)
    try:
        return Algorithm.resolve("eapo", values, where="GRPOConfig.")
    except SettingError as error:
        raise ValueError(str(error)) from None


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
