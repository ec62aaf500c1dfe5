"""The RL engines EAPO runs in, side by side: :mod:`eapo.engines.trl` (TRL's ``GRPOTrainer``, one node)
and :mod:`eapo.engines.verl` (a verl plugin, clusters).

Each is a thin adapter: it moves tensors into :class:`eapo.core.step.EAPOStep` (group statistics, the
polarity split, ``(w+, w-)``, ``H_0``, the ``eapo/*`` metrics, the state file ``eapo_state.json``) and
the weighted advantages back into its engine's loss. The engines import the layers below them
(:mod:`eapo.core`, :mod:`eapo.rewards`, :mod:`eapo.data`, :mod:`eapo.runtime`), never each other.
What samples the rollouts is a backend (:mod:`eapo.runtime.backends`), not an engine.
"""
