"""The ``eapo`` trainer for verl's v1 PPO loop: entropy → (w+, w-) → polarity-weighted advantages.

verl's synchronous v1 trainer (``verl.trainer.ppo.v1.PPOTrainerSync``) runs, per step: rollout →
reward → old log-probs (which writes each token's entropy into the TransferQueue as ``entropy``
and logs an aggregate as ``actor/entropy``) → ref log-probs → ``_compute_advantage`` → actor update.
This subclass overrides only ``_compute_advantage``: it computes ``H_t`` from the per-token
entropies with :func:`eapo.core.rollout_entropy` and ``algorithm.eapo.entropy_agg`` — the function
and setting :class:`eapo.engines.trl.trainer.EAPOTrainer` uses, so both engines give the same ``H_t`` for the same
rollouts — asks the weighting scheme for ``(w+_t, w-)`` (Eq. ``dynamic_weight`` for ``eapo``), hands
them to the registered estimator with :func:`~eapo.engines.verl.estimators.step_call`,
and logs::

    eapo/w_pos  eapo/w_neg  eapo/H0  eapo/frac_positive  eapo/num_unscored  entropy/rollout

and ``entropy/rollout_tokens``, the number of response tokens ``H_t`` averages over: the step's whole
batch, read back from the TransferQueue, so every data-parallel worker's rollouts count (verl's
old-log-prob pass writes each worker's shard there)

(the keys of :class:`eapo.engines.trl.trainer.EAPOTrainer`; ``eapo/H0`` is the anchor of a scheme that
``needs_entropy`` and the first step's entropy for the others). The step's decision — ``(w+, w-)``, ``H_0``, the
split, these metrics and the state — is :class:`eapo.core.step.EAPOStep`'s, the one the TRL trainer
uses; this class only moves verl's tensors and files in and out of it. Its state (the ``H_0`` anchor)
is written beside verl's checkpoint as ``global_step_N/eapo_state.json`` (the TRL checkpoint's name,
:data:`eapo.core.STATE_FILE`, by :func:`eapo.run_dir.write_step_state`) and restored on resume.

Enable it with ``trainer.use_v1=True trainer.v1.trainer_mode=eapo algorithm.adv_estimator=eapo``;
settings come from ``algorithm.eapo.*``, read into the run's :class:`eapo.core.Algorithm` by
:func:`eapo.engines.verl.settings.algorithm_for_trainer`.

Entropy controls (:mod:`eapo.engines.verl.entropy_control`): ``algorithm.eapo.method=clip_cov``
(and the other presets, with ``algorithm.adv_estimator=eapo_grpo``: GRPO's weights) or control keys
beside any scheme (``algorithm.eapo.epsilon_high=0.28`` with ``method=eapo``). ``__init__`` writes
their verl options into ``actor_rollout_ref.actor`` before verl's own ``__init__``; with a control
set, ``init()`` hands the actor workers eapo's wrapper of verl's ``ppo_loss`` (``set_loss_fn``),
``_compute_advantage`` also takes each control state's inputs to the update from core's step
(:meth:`eapo.core.EAPOStep.control_inputs`: a state that observes first, EntroPIC's, moves with ``H_t``
before its inputs are read, so α is the step's own; the others, the adaptive coefficient, move after),
``_update_actor`` passes them to the update in the batch's ``extra_info``, and the metrics
add ``entropy_control/coef``, ``entropy_control/clip_low_frac``, ``entropy_control/clip_high_frac``,
``entropy_control/cov_frac`` and each eapo-run control's weight share (its registered ``weight_metric``).
Each control's state (the adaptive coefficient: its value, anchored target and last entropy) is saved in
``eapo_state.json`` with the scheme's state.

Stop strings and rollouts (:mod:`eapo.engines.verl.rollouts`): ``step`` ends by reading the step's
rollouts back from the TransferQueue and logging why each ended, as shares of the step's rollouts::

    completions/stopped_by_string  completions/stopped_by_eos  completions/stopped_by_cap

and, every ``trainer.eapo.rollouts`` steps, appends them to ``trainer.eapo.rollouts_file``
(``rollouts.jsonl``: prompt, completion cut at its stop string, each reward component, the total, the
weighted advantage, the polarity and weight of eapo's split, the stop reason), from the driver, before
the step's checkpoint. The stop strings (``actor_rollout_ref.rollout.custom.stop``) are checked at
``__init__``, with the agent loop that applies them.

verl's own ``actor/entropy`` is aggregated with the actor's ``loss_agg_mode`` (``seq-mean-token-mean``
in the paper's setting); ``entropy/rollout`` (``H_t``) follows ``entropy_agg`` instead (default
``token-mean``, as on TRL), so the two differ when response lengths differ and
``entropy_agg != loss_agg_mode``. verl's padding rows (no response token) count in neither.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from typing import Any

import torch
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer, trainer_base
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

from eapo.core import WEIGHTING_SCHEMES, Algorithm, WeightingScheme, rollout_entropy
from eapo.core.step import STATE_FILE, EAPOStep, split_metrics
from eapo.engines.verl.entropy_control import (
    CONTROL_INPUTS_KEY,
    METRIC_PREFIX,
    VERL_ACTOR_OPTIONS,
    actor_metrics,
    apply_to_actor_config,
    controls_active,
    entropy_control_loss,
)
from eapo.engines.verl.estimators import step_call
from eapo.engines.verl.reward import component_scores
from eapo.engines.verl.rollouts import (
    AGENT_LOOP_NAME,
    STOP_SETTING,
    RolloutLog,
    RolloutRow,
    eos_token_ids,
    rollout_records,
    rollout_stops,
    stop_reason_metrics,
    stop_reason_of,
)
from eapo.engines.verl.settings import TRAINER_NAME, algorithm_for_trainer, estimator_of
from eapo.rewards.base import prompt_text
from eapo.run_dir import STEP_METRICS_FILE, append_jsonl, read_step_state, write_step_state
from eapo.runtime.stop import cut_text

__all__ = [
    "ENTROPY_FIELD",
    "EAPOVerlTrainer",
    "batch_entropy",
]

logger = logging.getLogger(__name__)

#: The eapo setting verl's ``actor.entropy_coeff`` carries (a control's ``verl_options``).
_COEF_SETTING = next(key for key, option in VERL_ACTOR_OPTIONS.items() if option == "entropy_coeff")

#: The per-token entropy field verl's old-log-prob pass writes into the TransferQueue.
ENTROPY_FIELD = "entropy"

#: The number of response tokens ``H_t`` (``entropy/rollout``) averages over, the step's whole batch
#: (every data-parallel worker's rollouts), logged by the ``eapo`` trainer.
ENTROPY_TOKENS_METRIC = "entropy/rollout_tokens"


def batch_entropy(data: Any, agg: str) -> float | None:
    """``H_t`` of a TransferQueue batch (a TensorDict of jagged ``entropy`` and ``response_mask``), or
    None when it has no per-token ``entropy``."""
    if ENTROPY_FIELD not in data.keys():
        return None
    padded = data.select(ENTROPY_FIELD, "response_mask").to_padded_tensor()
    value = rollout_entropy(padded[ENTROPY_FIELD], padded["response_mask"], agg=agg)
    if not math.isfinite(value):
        raise ValueError(
            f"the batch's per-token {ENTROPY_FIELD!r} averages to {value}: the old-log-prob pass "
            "produced a non-finite entropy"
        )
    return value


def _missing_entropy_message(name: str, *, control: bool = False) -> str:
    setting = f"the entropy control {name}" if control else f"algorithm.eapo.method={name}"
    return (
        f"{setting} needs this step's rollout entropy H_t from the per-token "
        f"{ENTROPY_FIELD!r} that verl's old-log-prob pass writes, but the batch has none. Bypass mode "
        "(algorithm.rollout_correction.bypass_mode=True) skips that pass: turn it off, or use a fixed "
        f"scheme without it ({', '.join(n for n, s in WEIGHTING_SCHEMES.items() if not s.needs_entropy)})."
    )


def _load_state(folder: str, step: EAPOStep) -> None:
    """Restore ``step`` from the checkpoint folder's state file (errors name the file)."""
    path = os.path.join(folder, STATE_FILE)
    try:
        missing = step.load_state_dict(read_step_state(folder))
    except (KeyError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from error
    for name in missing:
        logger.warning(
            "%s has no state for the entropy control %s (written without it): it starts afresh", path, name
        )


def _column(data: Any, name: str) -> list[Any]:
    """A field of a TransferQueue batch as a plain list, one entry per row (``[]`` when absent): tensors
    and NonTensorStacks through ``tolist``, TransferQueue's other containers through ``list``."""
    if name not in data.keys():
        return []
    value = data[name]
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _rows(data: Any, name: str) -> list[list[Any]]:
    """A jagged tensor field (``responses``, ``rm_scores``) as one Python list per row."""
    return [row.tolist() for row in data[name].unbind()]


def _session(key: str) -> int:
    """The rollout's place in its group from its TransferQueue key ``{uid}_{session}_{output}``."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise ValueError(f"unexpected TransferQueue key {key!r}: verl's are {{uid}}_{{session}}_{{output}}")
    return int(parts[1])


def _plain_number(value: Any) -> float | int | None:
    """A metric as a JSON number (numpy and torch scalars included), or None for anything else."""
    try:
        number = value.item() if hasattr(value, "item") else value
    except (TypeError, ValueError):
        return None
    if isinstance(number, bool) or not isinstance(number, int | float):
        return None
    return number if math.isfinite(number) else None


@register_trainer(TRAINER_NAME)
class EAPOVerlTrainer(PPOTrainerSync):
    """verl's synchronous v1 PPO trainer with EAPO's polarity weights (select with ``trainer_mode=eapo``)."""

    def __init__(self, config: Any) -> None:
        # Validate before verl's __init__ (and long before any GPU work).
        #: the run's algorithm, resolved once from algorithm.eapo (eapo.core.Algorithm)
        self.algorithm: Algorithm = algorithm_for_trainer(config.algorithm)
        self.weighting: WeightingScheme = self.algorithm.make_weighting()
        #: verl's advantage estimator that applies the scheme
        self.estimator = estimator_of(self.algorithm.scheme)
        self.eapo_step = self.algorithm.make_step(
            weighting=self.weighting
        )  # decision, H_0, controls, metrics
        #: the controls' inputs to this step's update (EAPOStep.control_inputs), None before the step
        self.step_inputs: dict[str, dict[str, float]] | None = None
        #: the response tokens this step's H_t averages over (ENTROPY_TOKENS_METRIC), None before it
        self._entropy_tokens: int | None = None
        rollout_correction = config.algorithm.get("rollout_correction", None) or {}
        if rollout_correction.get("bypass_mode", False):
            if self.weighting.needs_entropy:
                raise ValueError(_missing_entropy_message(self.algorithm.method))
            for name in self.eapo_step.controls:
                raise ValueError(_missing_entropy_message(name, control=True))
        distillation = config.get("distillation", None)
        if (
            controls_active(self.algorithm)
            and distillation is not None
            and distillation.get("enabled", False)
        ):
            raise ValueError(
                "algorithm.eapo's entropy controls run in eapo's wrapper of verl's ppo_loss, but distillation "
                "(distillation.enabled=True) replaces that loss with distillation_ppo_loss: turn one of them off"
            )
        # Where verl has the control, its own option carries eapo's value (entropy_coeff, clip_ratio_high,
        # policy_loss.*); verl's __init__ then validates the result as any user setting.
        self.verl_options = apply_to_actor_config(config.actor_rollout_ref.actor, self.algorithm)
        rollout = config.actor_rollout_ref.rollout
        self.stops: tuple[str, ...] = rollout_stops(rollout)
        agent = rollout.get("agent", None) or {}
        if self.stops and agent.get("default_agent_loop", None) == "single_turn_agent":
            raise ValueError(
                f"{STOP_SETTING} is set, but verl's single_turn_agent (actor_rollout_ref.rollout.agent."
                "default_agent_loop) would ignore it: verl has no stop-string setting of its own. Set "
                f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP_NAME}, eapo's agent loop"
            )
        self.rollout_log = RolloutLog.from_trainer_config(config.trainer)
        #: this step's rows as the estimator left them, by TransferQueue key: (advantage, positive, scored)
        self._step_split: dict[str, tuple[float, bool, bool]] = {}
        self._step_weights: tuple[float, float] = (math.nan, math.nan)
        super().__init__(config)

    def init(self) -> None:
        super().init()
        if controls_active(self.algorithm):
            self.actor_rollout_wg.set_loss_fn(self.actor_loss_fn())

    def actor_loss_fn(self) -> functools.partial:
        """The actor's loss with eapo's entropy controls, for ``set_loss_fn`` (verl's ``ppo_loss`` wrapped
        by :func:`~eapo.engines.verl.entropy_control.entropy_control_loss`, on the actor config
        the workers build themselves: ``omega_conf_to_dataclass(actor_rollout_ref.actor)``)."""
        from verl.utils.config import omega_conf_to_dataclass

        actor = omega_conf_to_dataclass(self.config.actor_rollout_ref.actor)
        return functools.partial(
            entropy_control_loss,
            config=actor,
            controls=tuple(control.name for control in self.algorithm.applied_by_eapo("verl")),
            settings=self.algorithm.control_values(),
        )

    # verl's PPOTrainer keeps the registry name it was created under in ``self.trainer_mode`` and also
    # uses it as the switch between synchronous and asynchronous behaviour (replay buffer, dataloader
    # refills, TransferQueue checkpoints), with "sync" meaning synchronous. This trainer is the
    # synchronous one, so the switch always reads "sync" (and ``trainer.v1.sync.*`` holds its options);
    # the name it was selected by is kept in ``registered_mode``.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        self.registered_mode = value

    # --- the one step EAPO changes ---------------------------------------------------------------

    def _compute_advantage(self, batch: Any, metrics: dict[str, Any]) -> Any:
        self._entropy_tokens = None
        entropy = self._rollout_entropy(batch)  # H_t, from this step's old-log-prob pass
        if entropy is not None and self._entropy_tokens is not None:
            # the response tokens H_t averages over: every data-parallel worker's, read back whole
            metrics[ENTROPY_TOKENS_METRIC] = self._entropy_tokens
        # verl's synthetic rows (a batch padded to the data-parallel size), by the tags of the batch sampled
        padding = torch.tensor(
            [bool(tag.get("is_padding", False)) for tag in batch.tags or []], dtype=torch.bool
        )
        if entropy is None and self.weighting.needs_entropy:
            raise RuntimeError(_missing_entropy_message(self.algorithm.method))
        with step_call(self.eapo_step, entropy, self.estimator) as call:  # core decides, in the estimator
            batch = super()._compute_advantage(batch, metrics)
        if call.metrics is None:
            raise RuntimeError(
                f"the {self.estimator!r} advantage estimator did not run, so (w+, w-) were not applied; "
                "verl computed advantages some other way (check algorithm.adv_estimator)"
            )
        metrics.update(call.metrics)
        if padding.any():  # they are no rollouts: the split's metrics without them
            metrics.update(split_metrics(call.positive[~padding], call.scored[~padding]))
        self._step_weights = (call.metrics["eapo/w_pos"], call.metrics["eapo/w_neg"])
        for key, row in zip(
            batch.keys,
            zip(call.advantages.tolist(), call.positive.tolist(), call.scored.tolist(), strict=True),
            strict=True,
        ):
            self._step_split[key] = row
        if controls_active(self.algorithm):
            try:  # each run state's inputs to this update, then moved by H_t
                self.step_inputs = self.eapo_step.control_inputs(entropy)
            except ValueError as error:
                name = next(iter(self.eapo_step.controls))
                raise RuntimeError(_missing_entropy_message(name, control=True)) from error
            metrics[f"{METRIC_PREFIX}coef"] = self._step_entropy_coef()
            metrics.update(self.eapo_step.control_metrics)
        return batch

    def _step_entropy_coef(self) -> float:
        """The entropy coefficient this step's update applies: a run state's per-step input for the setting
        verl's ``actor.entropy_coeff`` carries (the adaptive coefficient), else that option."""
        for inputs in (self.step_inputs or {}).values():
            if _COEF_SETTING in inputs:
                return float(inputs[_COEF_SETTING])
        return float(self.config.actor_rollout_ref.actor.entropy_coeff)

    def _update_actor(self, batch: Any, metrics: dict[str, Any]) -> Any:
        if self.eapo_step.controls:
            if self.step_inputs is None:
                raise RuntimeError("the entropy controls' inputs were not computed before the actor update")
            batch.extra_info[CONTROL_INPUTS_KEY] = json.dumps(
                self.step_inputs
            )  # read by entropy_control_loss
        update_metrics: dict[str, Any] = {}
        batch = super()._update_actor(batch, update_metrics)
        metrics.update(actor_metrics(update_metrics))
        return batch

    @property
    def first_entropy(self) -> float | None:
        """``H`` of the first step with an entropy (``eapo/H0`` for schemes without their own anchor)."""
        return self.eapo_step.first_entropy

    def _rollout_entropy(self, batch: Any) -> float | None:
        """``H_t`` from the per-token entropies of ``batch`` in the TransferQueue (None without them)."""
        rollout_correction = self.config.algorithm.get("rollout_correction", None) or {}
        if rollout_correction.get("bypass_mode", False):
            return None  # no old-log-prob pass, so no entropies (the eapo scheme is refused at init)
        data = trainer_base.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=[ENTROPY_FIELD, "response_mask"]
        )
        if "response_mask" in data.keys():
            self._entropy_tokens = int(data.select("response_mask").to_padded_tensor()["response_mask"].sum())
        return batch_entropy(data, self.algorithm.entropy_agg)

    # --- checkpoints: the scheme's state beside verl's -------------------------------------------

    def step(self, metrics: dict, timing_raw: dict) -> Any:
        self._step_split = {}
        batch = super().step(metrics, timing_raw)
        metrics.update(self._log_rollouts(batch))  # before the checkpoint, which records them too
        self._last_step = (metrics, batch)  # what the checkpoint of this step records (below)
        return batch

    # --- why rollouts ended, and rollouts.jsonl ---------------------------------------------------

    @functools.cached_property
    def eos_token_ids(self) -> frozenset[int]:
        """The ids vLLM ends a response at: the tokenizer's EOS and the model's generation config's."""
        from verl.utils.fs import copy_to_local
        from verl.utils.model import get_generation_config

        model = self.config.actor_rollout_ref.model
        path = copy_to_local(model.path, use_shm=model.get("use_shm", False))
        generation = get_generation_config(path, trust_remote_code=model.get("trust_remote_code", False))
        return eos_token_ids(self.tokenizer, generation)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)  # as verl's reward managers decode

    def _log_rollouts(self, batch: Any) -> dict[str, float]:
        """The step's ``completions/stopped_by_*`` shares; on a step ``trainer.eapo.rollouts`` names, its
        rollouts appended to ``rollouts.jsonl``. verl's padding rows (``is_padding``) count in neither."""
        fields = ["uid", "index", "raw_prompt", "responses", "rm_scores", "extra_fields"]
        data = trainer_base.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        rows = [
            i for i, tag in enumerate(batch.tags or [{}] * len(batch)) if not tag.get("is_padding", False)
        ]
        responses = _rows(data, "responses")
        texts = [self._decode(responses[i]) for i in rows]
        reasons = [
            stop_reason_of(text, responses[i], self.stops, self.eos_token_ids)
            for text, i in zip(texts, rows, strict=True)
        ]
        if self.rollout_log.due(self.global_steps):
            self._write_rollouts(batch, data, rows, texts, reasons)
        return stop_reason_metrics(reasons)

    def _write_rollouts(
        self, batch: Any, data: Any, rows: list[int], texts: list[str], reasons: list[str]
    ) -> None:
        uids, indices = _column(data, "uid"), _column(data, "index")
        prompts, extra_fields = _column(data, "raw_prompt"), _column(data, "extra_fields")
        scores = [sum(row) for row in _rows(data, "rm_scores")]  # the reward sits on the last token
        records = []
        for i, text, reason in zip(rows, texts, reasons, strict=True):
            key = batch.keys[i]
            if key not in self._step_split:
                raise RuntimeError(f"rollout {key} has no advantage from the {self.estimator!r} estimator")
            advantage, positive, scored = self._step_split[key]
            extra = extra_fields[i] if extra_fields and isinstance(extra_fields[i], dict) else {}
            index = indices[i] if indices else 0
            records.append(
                RolloutRow(
                    group=(index if isinstance(index, int | float) else 0, str(uids[i])),
                    sample=_session(key),
                    prompt=prompt_text(prompts[i]) if prompts else "",
                    completion=cut_text(text, self.stops)[0],
                    rewards=component_scores(extra.get("reward_extra_info") or {}),
                    reward=scores[i],
                    advantage=advantage,
                    positive=positive,
                    scored=scored,
                    stop_reason=reason,
                )
            )
        lines = rollout_records(self.global_steps, records, *self._step_weights)
        path = self.rollout_log.rollouts_file
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        append_jsonl(path, lines, what=f"the rollouts of step {self.global_steps}")

    def _save_checkpoint(self) -> None:
        # Written before verl's own save, which ends by updating latest_checkpointed_iteration.txt:
        # a checkpoint that resume can find always has the step's state, and the step's metrics. verl
        # logs a step only after its checkpoint and validation; a run killed in between would resume
        # after a step that metrics.jsonl never saw (eapo.engines.verl.launch fills it from here).
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        write_step_state(folder, self.eapo_step.state_dict())
        self._write_step_metrics(folder)
        super()._save_checkpoint()

    def _write_step_metrics(self, folder: str) -> None:
        """``STEP_METRICS_FILE``: the step's metrics as they stand at its checkpoint (training, eapo's,
        and verl's data metrics; not validation or the step's timing, which come later)."""
        from eapo.run_dir import atomic_write_text

        metrics, batch = getattr(self, "_last_step", ({}, None))
        snapshot = dict(metrics)
        if batch is not None:
            try:
                epoch = (self.global_steps - 1) // max(1, getattr(self, "steps_per_epoch", 1))
                self._compute_metrics(batch, snapshot, {}, global_steps=self.global_steps, epoch=epoch)
            except Exception as error:  # noqa: BLE001 - the training metrics alone are still worth keeping
                logger.warning(
                    "step %d's data metrics could not be computed at its checkpoint: %s",
                    self.global_steps,
                    error,
                )
        values = {key: _plain_number(value) for key, value in snapshot.items()}
        values = {key: value for key, value in values.items() if value is not None}
        atomic_write_text(
            os.path.join(folder, STEP_METRICS_FILE), json.dumps({"step": self.global_steps, "data": values})
        )

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        folder = self._resumed_folder()
        if folder is None:
            return
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            logger.warning(
                "resuming from %s, which has no %s (written by a run without the eapo trainer): "
                "the weighting scheme starts afresh and re-anchors H_0 on the next step",
                folder,
                STATE_FILE,
            )
            return
        _load_state(folder, self.eapo_step)
        logger.info("restored the %s weighting state from %s", self.algorithm.method, path)

    def _resumed_folder(self) -> str | None:
        """The ``global_step_N`` folder verl's ``_load_checkpoint`` resumed from, or None (fresh start)."""
        if self.global_steps == 0:
            return None
        trainer = self.config.trainer
        if trainer.resume_mode == "resume_path":
            folder = trainer.resume_from_path
        else:
            folder = find_latest_ckpt_path(os.path.abspath(trainer.default_local_dir))
        return os.path.abspath(folder) if folder else None
