"""This machine's fp32 matmul rate, the ceiling the benchmarks take shares of (``python bench/X.py``
puts bench/ on sys.path)."""

from __future__ import annotations

import time


def matmul_gflops(tokens: int, hidden: int, intermediate: int, repeats: int = 5) -> dict[str, float]:
    """Best-of-``repeats`` fp32 GFLOP/s of a 2048² ``torch.matmul`` and of ``F.linear`` at a model's MLP
    shape (``tokens`` rows, ``hidden`` -> ``intermediate``)."""
    import torch
    import torch.nn.functional as F

    def best(fn, flops: float) -> float:
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return flops / min(times) / 1e9

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    x, w = torch.randn(tokens, hidden), torch.randn(intermediate, hidden)
    return {
        "matmul_2048": best(lambda: a @ b, 2 * 2048**3),
        f"linear_{tokens}x{hidden}x{intermediate}": best(
            lambda: F.linear(x, w), 2 * tokens * hidden * intermediate
        ),
    }
