"""Adapters that run EAPO inside other RL engines (``eapo.integrations.verl`` for verl)."""
