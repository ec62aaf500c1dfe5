"""Which preset ``make demo`` runs: ``demo_gpu`` when CUDA is available, else ``demo``.

Both train SmolLM2-135M-Instruct with LoRA on the bundled QA set and are evaluated against the base
model; the GPU preset runs more steps with more prompts per step in about the CPU preset's wall
time. ``python -m eapo.demo`` prints the chosen preset's path (the Makefile reads it; ``make demo
DEMO_CONFIG=FILE`` overrides the choice).
"""

from __future__ import annotations

from pathlib import Path

CPU_PRESET = "demo"
GPU_PRESET = "demo_gpu"


def demo_preset(cuda: bool | None = None) -> str:
    """``"demo_gpu"`` when ``cuda`` (default: ``torch.cuda.is_available()``), else ``"demo"``."""
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    return GPU_PRESET if cuda else CPU_PRESET


def demo_config(cuda: bool | None = None) -> Path:
    """The packaged file of :func:`demo_preset` (``configs/demo.yaml`` or ``configs/demo_gpu.yaml``)."""
    from eapo.config import packaged_config

    return packaged_config(demo_preset(cuda))


if __name__ == "__main__":
    print(demo_config())
