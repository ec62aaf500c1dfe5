"""EAPO on TRL (1.16): a thin adapter around :class:`trl.GRPOTrainer`.

* :mod:`eapo.engines.trl.config` — :class:`EAPOConfig`, TRL's ``GRPOConfig`` with the paper's objective
  set explicitly and the weighting settings;
* :mod:`eapo.engines.trl.args` — the typed ``eapo train`` config translated into that ``EAPOConfig``,
  peft's ``LoraConfig``, the vLLM and entropy-control settings;
* :mod:`eapo.engines.trl.trainer` — :class:`EAPOTrainer`: moves rewards, masks and entropies into
  :class:`eapo.core.step.EAPOStep` and the weighted advantages back into TRL's loss;
* :mod:`eapo.engines.trl.policy_forward` and :mod:`eapo.engines.trl.lm_head` — the completion-only
  log-prob head (a chunked LM-head kernel) that replaces TRL's off CUDA;
* :mod:`eapo.engines.trl.vllm` — TRL's colocated vLLM with the policy's dtype, a CPU weight sync and
  seeding;
* :mod:`eapo.engines.trl.callbacks`, :mod:`eapo.engines.trl.validation`,
  :mod:`eapo.engines.trl.sharding` — metrics files, in-training validation, FSDP on CPU processes.

Nothing here decides EAPO's step: that is :mod:`eapo.core.step`, shared with :mod:`eapo.engines.verl`.
"""
