"""The per-step wall-time callback the benchmarks share (``python bench/X.py`` puts bench/ on sys.path)."""

from __future__ import annotations

import time

from transformers import TrainerCallback


class StepTimer(TrainerCallback):
    """Records the wall time of every optimisation step (generation + scoring + update); on a GPU it
    waits for the device before reading the clock."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self._start)
