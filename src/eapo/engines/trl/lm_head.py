"""A chunked LM-head kernel: per-token ``log p(target)`` and entropy without keeping the logits.

Used by the completion-only log-prob head of the TRL engine (:mod:`eapo.engines.trl.policy_forward`):
it projects only the scored positions, one chunk at a time, and recomputes each chunk's logits in the
backward, so peak extra memory is two ``(chunk, V)`` float32 blocks however long the batch. It is an
engine's performance kernel, not part of EAPO's maths (:mod:`eapo.core`), and is checked against a
float64 ``log_softmax`` (``tests/engines/trl/test_policy_forward.py``).
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs_and_entropy"]


class _TokenLogProbs(torch.autograd.Function):
    """``log p(target)`` and ``H`` of ``softmax((hidden @ weight.T + bias) / temperature)``, chunked over
    tokens. The forward keeps only ``log Z`` and ``H`` per token; the backward recomputes each chunk's
    logits (peak extra memory: two ``(chunk, V)`` float32 blocks)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_tokens):
        ctx.set_materialize_grads(False)
        n = hidden.shape[0]
        logps = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_empty(n, dtype=torch.float32)
        log_z = hidden.new_empty(n, dtype=torch.float32)
        for start in range(0, n, chunk_tokens):
            end = min(start + chunk_tokens, n)
            z = _chunk_logits(hidden[start:end], weight, bias, temperature)  # [n, V] float32
            log_z[start:end] = torch.logsumexp(z, dim=-1)
            log_p = z.sub_(log_z[start:end, None])  # in place: z is now log p
            logps[start:end] = log_p.gather(1, targets[start:end, None]).squeeze(1)
            # H = -Σ p log p; 0·log 0 = 0 where a probability underflows
            entropy[start:end] = -torch.nan_to_num(log_p.exp().mul_(log_p), nan=0.0).sum(dim=-1)
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, entropy)
        ctx.temperature, ctx.chunk_tokens = temperature, chunk_tokens
        return logps, entropy

    @staticmethod
    def backward(ctx, grad_logps, grad_entropy):
        hidden, weight, bias, targets, log_z, entropy = ctx.saved_tensors
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.zeros_like(hidden, dtype=torch.float32) if needs_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_weight else None
        grad_bias = torch.zeros_like(bias, dtype=torch.float32) if needs_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            end = min(start + ctx.chunk_tokens, hidden.shape[0])
            log_p = _chunk_logits(hidden[start:end], weight, bias, ctx.temperature).sub_(
                log_z[start:end, None]
            )
            p = log_p.exp()
            # d log p_t / dz_j = 1[j = t] - p_j ;  dH / dz_j = -p_j (log p_j + H)
            g_lp = grad_logps[start:end, None].float() if grad_logps is not None else None
            if grad_entropy is not None:
                coeff = log_p.add_(entropy[start:end, None]).mul_(grad_entropy[start:end, None].float())
                if g_lp is not None:
                    coeff.add_(g_lp)  # g_lp + g_H (log p_j + H)
            else:
                coeff = g_lp
            grad_z = p.mul_(coeff).neg_()  # -p_j (g_lp + g_H (log p_j + H))
            if grad_logps is not None:
                grad_z.scatter_add_(1, targets[start:end, None], g_lp)
            grad_z.div_(ctx.temperature)
            if grad_hidden is not None:
                grad_hidden[start:end] = grad_z.to(weight.dtype) @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad_z.t(), hidden[start:end].float())
            if grad_bias is not None:
                grad_bias += grad_z.sum(dim=0)

        def cast(grad, like):
            return None if grad is None else grad.to(like.dtype)

        return cast(grad_hidden, hidden), cast(grad_weight, weight), cast(grad_bias, bias), None, None, None


def _chunk_logits(hidden, weight, bias, temperature) -> torch.Tensor:
    z = (hidden @ weight.t() if bias is None else torch.addmm(bias, hidden, weight.t())).float()
    return z if temperature == 1.0 else z.div_(temperature)


def token_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_tokens: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probability of ``targets`` and entropy under an LM head, without keeping logits.

    ``p = softmax((hidden @ weight.T + bias) / temperature)``: ``log p[target]`` and
    ``H = -Σ_v p_v log p_v`` for each row, from one pass over each chunk's logits. Both are
    differentiable (w.r.t. ``hidden``, ``weight`` and ``bias``); the backward recomputes the logits
    chunk by chunk, so peak extra memory is O(``chunk_tokens`` × V) however many rows there are.
    Pass only the positions that are scored (e.g. completion tokens): each row costs a full
    ``V``-wide projection.

    Args:
        hidden: ``(N, H)`` final hidden states (after the model's last norm).
        weight: ``(V, H)`` the LM head.
        targets: ``(N,)`` token ids, in ``[0, V)``.
        bias: ``(V,)`` or None.
        temperature: the sampling temperature the log-probabilities describe (> 0).
        chunk_tokens: rows projected at once.

    Returns:
        ``(logps, entropy)``, each ``(N,)`` float32.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden (N, H) and weight (V, H) expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be (N,) = {tuple(hidden.shape[:1])}, got {tuple(targets.shape)}")
    return _TokenLogProbs.apply(hidden, weight, bias, targets, float(temperature), int(chunk_tokens))
