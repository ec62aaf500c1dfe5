"""The trainer's log-prob forward on devices without TRL's Triton kernel: completion positions only,
and the frozen layers the policy shares with its reference computed once per step.

TRL 1.16 patches the causal LM's ``forward`` so that ``model(..., labels=labels, fused_lm_head=True)``
returns per-token log-probabilities and entropies without materialising logits
(``trl.trainer.utils.add_fused_lm_head``). Off CUDA/XPU it projects *every* position of the
sequence through the ``V``-wide LM head (prompt positions included, then zeroed) and folds each
tile in several elementwise passes. :func:`install_completion_head` replaces that forward with one
that

1. projects only the positions whose label is scored (the completion), through
   :func:`eapo.engines.trl.lm_head.token_logprobs_and_entropy` (one log-softmax per chunk, recomputed in the
   backward);
2. with ``share_frozen_layers``: when the first ``K`` decoder layers (and the embeddings) hold no
   trainable parameter and no adapter — LoRA on the last N layers, the reference being the same
   model with its adapter disabled — the hidden states entering layer ``K`` are the same in the
   reference pass, the old-log-prob pass and the policy's loss pass of one step. The first pass of
   a step caches them per sequence; later passes over the same sequences run only layers ``K..L-1``.
   The first reuse is checked once against the full forward (and sharing switched off, with a
   warning, if they differ: an architecture whose forward does more than embed and stack layers).

Everything else (multimodal inputs, pre-shifted labels, sharded weights, soft-capped or scaled
logits) goes through TRL's forward unchanged. ``tests/engines/trl/test_policy_forward.py`` checks
log-probs, entropies, H_t, the loss and the gradients against TRL's forward.
"""

from __future__ import annotations

import logging
import types
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from eapo.engines.trl.lm_head import token_logprobs_and_entropy

logger = logging.getLogger(__name__)

# How far the first reuse of shared hidden states may be from the full forward (float32 round-off of
# the same operations in the same order is exactly 0; anything above this means a different forward).
SHARE_CHECK_ATOL = 1e-4
# Model families whose decoder forward is "embed, stack layers, norm" with per-layer-identical masks.
_STACKED_DECODERS = ("llama", "mistral", "qwen2", "qwen3", "smollm3")
_TEXT_ARGS = {"input_ids", "attention_mask", "use_cache", "return_dict"}


class CompletionHead:
    """State of the installed forward: the frozen-prefix cache and what ran (for tests and logs)."""

    def __init__(self, shared_layers: int, temperature: float, chunk_tokens: int) -> None:
        self.shared_layers = shared_layers
        self.temperature = temperature
        self.chunk_tokens = chunk_tokens
        self.checked = False
        self._cache: dict[bytes, torch.Tensor] = {}
        self.calls = {"completion_head": 0, "shared_prefix_reused": 0, "delegated": 0}

    def reset(self) -> None:
        """Forget cached hidden states (a new step's rollouts)."""
        self._cache.clear()

    def describe(self) -> str:
        k = self.shared_layers
        layers = "layer 0" if k == 1 else f"layers 0-{k - 1}"
        shared = f", {layers} shared with the reference" if k else ""
        return f"completion positions only{shared}"


def frozen_prefix_layers(model: nn.Module) -> int:
    """How many leading decoder layers of ``model`` (a causal LM) hold no trainable parameter, no
    adapter and no active dropout, with frozen embeddings: 0 when sharing is not possible."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _STACKED_DECODERS:
        return 0
    if len(set(getattr(config, "layer_types", None) or ["same"])) > 1:
        return 0  # e.g. sliding-window layers: their masks depend on the layer index
    backbone = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(backbone, "layers", None)
    embed = getattr(backbone, "embed_tokens", None)
    if layers is None or embed is None or any(p.requires_grad for p in embed.parameters()):
        return 0
    if getattr(config, "attention_dropout", 0.0):
        return 0
    from peft.tuners.tuners_utils import BaseTunerLayer

    count = 0
    for layer in layers:
        if any(p.requires_grad for p in layer.parameters()):
            break
        if any(isinstance(m, BaseTunerLayer) for m in layer.modules()):
            break
        if any(isinstance(m, nn.Dropout) and m.p > 0 for m in layer.modules()):
            break
        count += 1
    return count if count < len(layers) else 0  # nothing trainable at all: no policy pass to share with


def install_completion_head(
    model: nn.Module, *, temperature: float, share_frozen_layers: bool, chunk_tokens: int = 1024
) -> CompletionHead:
    """Replace TRL's fused forward on ``model`` (the causal LM TRL patched, under any PEFT wrapper)."""
    trl_forward = model.forward  # TRL's fused forward (bound), kept for what this one does not handle
    original_forward = types.MethodType(type(model).forward, model)
    shared = frozen_prefix_layers(model) if share_frozen_layers else 0
    head = CompletionHead(shared, temperature, chunk_tokens)

    def forward(
        self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None, **kwargs
    ):
        if not fused_lm_head:
            extra = {"labels": labels, "shift_labels": shift_labels, "num_items_in_batch": num_items_in_batch}
            return original_forward(*args, **kwargs, **{k: v for k, v in extra.items() if v is not None})
        if not _handled(self, args, kwargs, shift_labels):
            head.calls["delegated"] += 1
            return trl_forward(
                *args,
                fused_lm_head=True,
                labels=labels,
                shift_labels=shift_labels,
                num_items_in_batch=num_items_in_batch,
                **kwargs,
            )
        head.calls["completion_head"] += 1
        hidden = _backbone_hidden(self, head, kwargs["input_ids"], kwargs.get("attention_mask"))  # [B, S, H]
        hidden, labels = hidden[:, :-1], labels[:, 1:]
        mask = labels != -100  # [B, S-1]
        lm_head = self.get_output_embeddings()
        logps, entropy = token_logprobs_and_entropy(
            hidden[mask],
            lm_head.weight,
            labels[mask],
            bias=lm_head.bias,
            temperature=head.temperature,
            chunk_tokens=head.chunk_tokens,
        )
        # masked_scatter keeps an all-masked micro-batch connected to the graph (a zero gradient)
        log_probs = logps.new_zeros(mask.shape).masked_scatter(mask, logps)
        entropies = entropy.new_zeros(mask.shape).masked_scatter(mask, entropy)
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        from trl.trainer.utils import FusedCausalLMOutput

        return FusedCausalLMOutput(
            loss=-log_probs.sum() / count, log_probs=log_probs, entropy=entropies, label_mask=mask
        )

    model.forward = types.MethodType(forward, model)
    model.eapo_completion_head = head
    return head


def _handled(model: nn.Module, args: tuple, kwargs: dict[str, Any], shift_labels: Any) -> bool:
    """Text-only, unshifted labels, a plain (unsharded, unscaled, uncapped) LM head."""
    if args or shift_labels is not None or "input_ids" not in kwargs:
        return False
    # PEFT passes every optional argument, mostly as None or False
    if {key for key, value in kwargs.items() if value is not None and value is not False} - _TEXT_ARGS:
        return False
    weight = model.get_output_embeddings().weight
    if type(weight) is not nn.Parameter and type(weight) is not torch.Tensor:
        return False  # e.g. an FSDP2 DTensor: TRL gathers it
    text = model.config.get_text_config()
    scaled = any(
        getattr(text, name, None) not in (None, 1.0)
        for name in ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    )
    return not scaled and getattr(text, "final_logit_softcapping", None) is None


def _backbone_hidden(model: nn.Module, head: CompletionHead, input_ids, attention_mask) -> torch.Tensor:
    """The backbone's last hidden states, reusing (or caching) the frozen layers' output."""
    backbone = getattr(model, model.base_model_prefix)
    k = head.shared_layers
    if not k:
        return backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    keys = _row_keys(input_ids, attention_mask)
    cached = [head._cache.get(key) for key in keys]
    if any(row is None for row in cached):
        captured: list[torch.Tensor] = []
        layer = backbone.layers[k]
        hook = layer.register_forward_pre_hook(
            lambda _m, a, kw: captured.append((a[0] if a else kw["hidden_states"]).detach()), with_kwargs=True
        )
        try:
            out = backbone(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        finally:
            hook.remove()
        head._cache.update(zip(keys, captured[0].unbind(0), strict=True))
        return out
    prefix = torch.stack(cached)  # [B, S, H]
    head.calls["shared_prefix_reused"] += 1
    with _only_layers_from(backbone, k):
        out = backbone(inputs_embeds=prefix, attention_mask=attention_mask, use_cache=False).last_hidden_state
    if not head.checked:
        head.checked = True
        with torch.no_grad():
            full = backbone(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
        error = (full - out.detach()).abs().max().item()
        if error > SHARE_CHECK_ATOL:
            logger.warning(
                "sharing layers 0-%d with the reference changed the hidden states by %.2e: switched off "
                "(%s's forward is not embed-then-layers)",
                k - 1,
                error,
                model.config.model_type,
            )
            head.shared_layers = 0
            head.reset()
            return _backbone_hidden(model, head, input_ids, attention_mask)
    return out


def _row_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[bytes]:
    ids = input_ids.detach().cpu()
    mask = attention_mask.detach().cpu() if attention_mask is not None else torch.ones_like(ids)
    return [i.numpy().tobytes() + b"|" + m.numpy().tobytes() for i, m in zip(ids, mask, strict=True)]


@contextmanager
def _only_layers_from(backbone: nn.Module, k: int):
    layers = backbone.layers
    backbone.layers = nn.ModuleList(list(layers)[k:])
    try:
        yield
    finally:
        backbone.layers = layers
