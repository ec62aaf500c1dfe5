"""eapo: Entropy-driven Adaptive Positive-negative sample weighting for Policy Optimization.

The algorithm core is :mod:`eapo.core` (pure tensor maths). Rewards live in :mod:`eapo.rewards`,
datasets and prompts in :mod:`eapo.data`, the TRL trainer in :mod:`eapo.train`, evaluation,
plots and sweeps in :mod:`eapo.evaluate`, :mod:`eapo.plot`, :mod:`eapo.sweep`, and the verl
plugin in :mod:`eapo.integrations.verl`.
"""

__version__ = "0.1.0"
