"""Rooflines the benchmarks share (``python bench/X.py`` puts bench/ on sys.path).

A phase's floor is the larger of its FLOPs at the matmul rate and its bytes at the memory bandwidth,
both measured in the same run on the same device (:func:`measure_ceilings`). Decoding a small model at
a small batch reads every weight once per token and does little arithmetic per byte: a FLOPs-only
floor there is one no implementation can reach.

What is counted (lower bounds: what no implementation can avoid):

* FLOPs: 2 per multiply-add of the decoder's matmuls, causal attention (QK^T and AV), and the LM head
  where a token is scored;
* bytes: every weight read once per pass (a forward or one decoding step) and per micro-batch, the
  KV cache read once per decoded token, a backward's weights read twice and its gradients written,
  AdamW's fp32 parameter, gradient and two moments read and three written. Activations and logits are
  not counted: a fused kernel need not write them.

Decoding is a sequence of steps, one token per live row each: its floor is the sum over steps of each
step's max(FLOPs / rate, bytes / bandwidth) (:meth:`Shapes.decode_floor`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: AdamW's bytes per trainable parameter a step: fp32 parameter, gradient, two moments read (16),
#: parameter and two moments written (12).
ADAMW_BYTES_PER_PARAM = 28


@dataclass
class Ceilings:
    """One device's measured matmul rate and memory bandwidth."""

    device: str
    dtype: str
    flops_per_s: float  # the best matmul rate measured
    bytes_per_s: float  # the best of copy (read + write) and reduction (read) bandwidth
    detail: dict[str, float]

    def floor_s(self, flops: float, bytes_: float) -> float:
        return max(flops / self.flops_per_s, bytes_ / self.bytes_per_s)

    def bound(self, flops: float, bytes_: float) -> str:
        return "compute" if flops / self.flops_per_s >= bytes_ / self.bytes_per_s else "memory"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _timed(fn, repeats: int, sync) -> list[float]:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return times


def measure_ceilings(
    device: str = "cpu",
    dtype: str = "float32",
    linear_shape: tuple[int, int, int] | None = None,
    *,
    repeats: int = 5,
    matmul_size: int | None = None,
    bandwidth_bytes: int | None = None,
) -> Ceilings:
    """The matmul rate (a square product, and ``F.linear`` at ``linear_shape`` = (tokens, in, out) when
    given; the best of ``repeats`` each) and the memory bandwidth (a tensor copy counting bytes read
    and written, and a sum counting bytes read; the best of ``repeats``) of ``device`` in ``dtype``."""
    import torch
    import torch.nn.functional as F

    torch_dtype = getattr(torch, dtype)
    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    size = matmul_size or (8192 if cuda else 2048)
    detail: dict[str, float] = {}
    with torch.device(device):
        a = torch.randn(size, size, dtype=torch_dtype)
        b = torch.randn(size, size, dtype=torch_dtype)
        detail[f"matmul_{size}_gflops"] = 2 * size**3 / min(_timed(lambda: a @ b, repeats, sync)) / 1e9
        if linear_shape is not None:
            tokens, d_in, d_out = linear_shape
            x = torch.randn(tokens, d_in, dtype=torch_dtype)
            w = torch.randn(d_out, d_in, dtype=torch_dtype)
            detail[f"linear_{tokens}x{d_in}x{d_out}_gflops"] = (
                2 * tokens * d_in * d_out / min(_timed(lambda: F.linear(x, w), repeats, sync)) / 1e9
            )
        numel = (bandwidth_bytes or (4 << 30 if cuda else 512 << 20)) // 4
        src = torch.randn(numel, dtype=torch.float32)
        dst = torch.empty_like(src)
        nbytes = numel * 4
        detail["copy_gbytes_per_s"] = 2 * nbytes / min(_timed(lambda: dst.copy_(src), repeats, sync)) / 1e9
        detail["sum_gbytes_per_s"] = nbytes / min(_timed(lambda: src.sum(), repeats, sync)) / 1e9
    if cuda:
        torch.cuda.empty_cache()
        name = torch.cuda.get_device_name(torch.device(device))
    else:
        import platform

        name = platform.processor() or platform.machine() or "cpu"
    flops = max(v for k, v in detail.items() if k.endswith("_gflops")) * 1e9
    bandwidth = max(detail["copy_gbytes_per_s"], detail["sum_gbytes_per_s"]) * 1e9
    return Ceilings(device=name, dtype=dtype, flops_per_s=flops, bytes_per_s=bandwidth, detail=detail)


class Shapes:
    """FLOP and byte counts of one causal decoder from its config (2 FLOPs per multiply-add)."""

    def __init__(self, config: Any, *, weight_bytes: int = 4, kv_bytes: int | None = None) -> None:
        self.hidden = config.hidden_size
        self.layers = config.num_hidden_layers
        self.vocab = config.vocab_size
        self.intermediate = config.intermediate_size
        heads = config.num_attention_heads
        self.head_dim = getattr(config, "head_dim", None) or self.hidden // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        self.heads = heads
        self.kv_heads = kv
        linear = self.hidden * heads * self.head_dim * 2 + 2 * self.hidden * kv * self.head_dim
        self.layer_params = linear + 3 * self.hidden * self.intermediate  # matmul weights, one layer
        self.layer_linear = 2 * self.layer_params  # FLOPs per token, one layer
        self.weight_bytes_per_param = weight_bytes
        self.kv_bytes_per_value = kv_bytes if kv_bytes is not None else weight_bytes

    # --- parameters and bytes ---------------------------------------------------------------
    @property
    def matmul_params(self) -> int:
        """Weights a forward reads: every layer's matmuls and the LM head (tied or not, read once)."""
        return self.layers * self.layer_params + self.hidden * self.vocab

    @property
    def weight_bytes(self) -> float:
        return float(self.matmul_params * self.weight_bytes_per_param)

    def kv_bytes(self, context: float) -> float:
        """Bytes of the KV cache of ``context`` tokens (keys and values, every layer)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * context * self.kv_bytes_per_value

    # --- FLOPs ------------------------------------------------------------------------------
    def layer_forward(self, length: int) -> float:
        """One layer over a causal sequence of ``length`` tokens (matmuls + QK^T and AV)."""
        attention = 2 * 2 * self.heads * self.head_dim * length * (length + 1) / 2
        return self.layer_linear * length + attention

    def lm_head(self, tokens: int) -> float:
        return 2.0 * self.hidden * self.vocab * tokens

    def decode(self, prompt: int, completion: int) -> float:
        """FLOPs of ``completion`` tokens decoded one by one after a cached ``prompt``."""
        contexts = completion * prompt + completion * (completion + 1) / 2
        attention = 2 * 2 * self.heads * self.head_dim * contexts
        return self.layers * (self.layer_linear * completion + attention) + self.lm_head(completion)

    # --- costs of whole phases: (FLOPs, bytes) ----------------------------------------------
    def forward_cost(
        self,
        prompts: Sequence[int],
        completions: Sequence[int],
        micro_batches: int,
        layers: int | None = None,
    ) -> tuple[float, float]:
        """A scoring forward over every sequence (LM head on completion tokens only); ``layers``: only the
        top ``layers`` of the decoder run (the hidden states below them given)."""
        layers = self.layers if layers is None else layers
        flops = sum(layers * self.layer_forward(p + c) for p, c in zip(prompts, completions, strict=True))
        flops += self.lm_head(sum(completions))
        params = layers * self.layer_params + self.hidden * self.vocab
        return flops, params * self.weight_bytes_per_param * float(max(micro_batches, 1))

    def backward_cost(
        self,
        prompts: Sequence[int],
        completions: Sequence[int],
        micro_batches: int,
        adapted_layers: int | None,
    ) -> tuple[float, float]:
        """A full fine-tune's backward: twice the forward's FLOPs, weights read twice and gradients
        written (accumulated: read and written) per micro-batch. LoRA: the input gradient through the
        adapted layers and the LM head, their weights read once."""
        pairs = list(zip(prompts, completions, strict=True))
        micro_batches = max(micro_batches, 1)
        if adapted_layers is None:
            forward, _ = self.forward_cost(prompts, completions, micro_batches)
            grads = self.matmul_params * 4.0 * 2  # fp32 gradient read and written
            return 2 * forward, (2 * self.weight_bytes + grads) * micro_batches
        flops = sum(adapted_layers * self.layer_forward(p + c) for p, c in pairs)
        flops += self.lm_head(sum(completions))
        params = adapted_layers * self.layer_params + self.hidden * self.vocab
        return flops, params * self.weight_bytes_per_param * float(micro_batches)

    def prefill_cost(self, distinct_prompts: Sequence[int]) -> tuple[float, float]:
        """One prefill per distinct prompt, batched: weights read once; the KV cache written."""
        flops = sum(self.layers * self.layer_forward(p) + self.lm_head(1) for p in distinct_prompts)
        return flops, self.weight_bytes + self.kv_bytes(sum(distinct_prompts))

    def decode_floor(
        self, prompts: Sequence[int], completions: Sequence[int], ceilings: Ceilings
    ) -> tuple[float, float, float]:
        """(FLOPs, bytes, floor seconds) of decoding every row's completion, all rows in one batch:
        step t decodes one token of every row longer than t, reading every weight once and each live
        row's KV cache; its floor is max(FLOPs / rate, bytes / bandwidth); the phase's is their sum."""
        import numpy as np

        p = np.asarray(prompts, dtype=np.float64)
        c = np.asarray(completions, dtype=np.float64)
        if len(c) == 0 or c.max() <= 0:
            return 0.0, 0.0, 0.0
        steps = np.arange(int(c.max()))[:, None]  # (T, 1)
        live = steps < c[None, :]  # (T, rows)
        context = (p[None, :] + steps + 1) * live  # tokens attended to at step t
        per_token = self.layers * self.layer_linear + self.lm_head(1)
        attention = self.layers * 2 * 2 * self.heads * self.head_dim * context.sum(axis=1)
        flops = per_token * live.sum(axis=1) + attention
        bytes_ = self.weight_bytes + self.kv_bytes(1.0) * context.sum(axis=1)
        floor = np.maximum(flops / ceilings.flops_per_s, bytes_ / ceilings.bytes_per_s).sum()
        return float(flops.sum()), float(bytes_.sum()), float(floor)

    def generation_floor(
        self, prompts: Sequence[int], completions: Sequence[int], group: int, ceilings: Ceilings
    ) -> dict[str, float]:
        """Prefill (one per distinct prompt) and decoding, all rows in one batch."""
        pre_flops, pre_bytes = self.prefill_cost(list(prompts)[:: max(group, 1)])
        dec_flops, dec_bytes, dec_floor = self.decode_floor(prompts, completions, ceilings)
        return {
            "flops": pre_flops + dec_flops,
            "bytes": pre_bytes + dec_bytes,
            "floor_s": ceilings.floor_s(pre_flops, pre_bytes) + dec_floor,
            "decode_steps": float(max(completions, default=0)),
        }


def optimizer_cost(trainable_params: int) -> tuple[float, float]:
    """AdamW over ``trainable_params``: ~10 FLOPs and :data:`ADAMW_BYTES_PER_PARAM` bytes each."""
    return 10.0 * trainable_params, float(ADAMW_BYTES_PER_PARAM * trainable_params)


def lengths_from_summary(rows: int, mean: float, longest: float) -> list[int]:
    """Per-row lengths with the logged mean and maximum, when only those are known: one row at the
    maximum, the rest sharing what is left. A lower bound's input: the decode steps are the longest
    row's, the tokens the mean's."""
    if rows <= 0:
        return []
    longest = int(round(longest))
    rest = max(mean * rows - longest, 0.0)
    share = rest / max(rows - 1, 1)
    return [longest] + [int(round(share))] * (rows - 1)
