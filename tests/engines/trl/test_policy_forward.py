"""eapo's log-prob forward (eapo.engines.trl.policy_forward) against TRL's fused LM head: the same log-probs,
entropies, H_t, loss and gradients.

Tolerances: both paths compute the same float32 quantities with different summation orders (TRL's
online log-sum-exp over 32k-wide vocabulary tiles, eapo's one log-softmax per row), so values agree to
float32 round-off: 2e-5 absolute on log-probs and entropies of a 300-token vocabulary, 1e-4 relative
on gradients (sums over many such terms), 1e-5 on the loss.
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest
import torch

from eapo.core import rollout_entropy
from eapo.engines.trl.lm_head import token_logprobs_and_entropy

ATOL = 2e-5
ROOT = Path(__file__).resolve().parents[3]


# ----------------------------------------------------------------------------------------------
# The kernel: eapo.engines.trl.lm_head.token_logprobs_and_entropy
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_bias", [False, True])
def test_token_logprobs_and_entropy_equal_float64_log_softmax(temperature, with_bias):
    """Values and all three gradients (hidden, weight, bias) equal an explicit float64 log-softmax,
    for chunks that do not divide the row count, and for a loss on log-probs and entropies alike."""
    generator = torch.Generator().manual_seed(0)
    n, hidden_size, vocab = 37, 16, 101
    hidden = torch.randn(n, hidden_size, generator=generator, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, generator=generator, requires_grad=True)
    bias = torch.randn(vocab, generator=generator, requires_grad=True) if with_bias else None
    targets = torch.randint(0, vocab, (n,), generator=generator)
    g_lp, g_h = torch.randn(n, generator=generator), torch.randn(n, generator=generator)

    logps, entropy = token_logprobs_and_entropy(
        hidden, weight, targets, bias=bias, temperature=temperature, chunk_tokens=8
    )
    (logps * g_lp + entropy * g_h).sum().backward()

    leaves = [x.detach().double().requires_grad_() for x in (hidden, weight) + ((bias,) if with_bias else ())]
    logits = leaves[0] @ leaves[1].t() + (leaves[2] if with_bias else 0.0)
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    ref_logps = log_p.gather(1, targets[:, None]).squeeze(1)
    ref_entropy = -(log_p.exp() * log_p).sum(-1)
    (ref_logps * g_lp.double() + ref_entropy * g_h.double()).sum().backward()

    assert logps.dtype == entropy.dtype == torch.float32
    assert torch.allclose(logps.double(), ref_logps, atol=ATOL, rtol=0)
    assert torch.allclose(entropy.double(), ref_entropy, atol=ATOL, rtol=0)
    for ours, ref in zip((hidden, weight) + ((bias,) if with_bias else ()), leaves, strict=True):
        assert torch.allclose(ours.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)


def test_token_logprobs_and_entropy_only_log_probs_in_the_loss():
    """The usual GRPO case: entropies only logged (no gradient), log-probs in the loss."""
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, generator=generator, requires_grad=True)
    weight = torch.randn(50, 8, generator=generator)
    targets = torch.randint(0, 50, (9,), generator=generator)
    logps, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_tokens=4)
    logps.sum().backward()
    expected = torch.autograd.grad(
        torch.log_softmax(hidden @ weight.t(), -1).gather(1, targets[:, None]).sum(), hidden
    )[0]
    assert torch.allclose(hidden.grad, expected, atol=1e-5)


def test_token_logprobs_and_entropy_reject_bad_shapes():
    with pytest.raises(ValueError, match="temperature"):
        token_logprobs_and_entropy(
            torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long), temperature=0
        )
    with pytest.raises(ValueError, match=r"targets must be \(N,\)"):
        token_logprobs_and_entropy(torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(3, dtype=torch.long))


# ----------------------------------------------------------------------------------------------
# The model forward: eapo.engines.trl.policy_forward against trl.trainer.utils.add_fused_lm_head
# ----------------------------------------------------------------------------------------------


def _lora_models(num_layers: int = 4, lora_layers: int = 2, temperature: float = 0.8):
    """Two identical LoRA policies on a tiny Llama (adapters on the last ``lora_layers`` layers, made
    non-zero so the policy differs from its reference): one with TRL's head, one with eapo's."""
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from eapo.engines.trl.policy_forward import install_completion_head
    from eapo.runtime.models import build_tiny_model

    base, _ = build_tiny_model(num_layers=num_layers, seed=3)
    layers = list(range(num_layers - lora_layers, num_layers))
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], layers_to_transform=layers
    )
    models = []
    for which in ("trl", "eapo"):
        model = copy.deepcopy(base)
        add_fused_lm_head(
            model, temperature=temperature, outputs=("log_probs", "entropy")
        )  # as GRPOTrainer does
        torch.manual_seed(0)  # peft draws lora_A from the global generator
        peft_model = get_peft_model(model, config)
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(param, std=0.05)
        head = None
        if which == "eapo":
            head = install_completion_head(model, temperature=temperature, share_frozen_layers=True)
        peft_model.train()
        models.append((peft_model, head))
    return models


def _batch(generator_seed: int = 0, rows: int = 6, prompt: int = 11, completion: int = 7):
    """Left-padded prompts and right-padded completions, as TRL builds them."""
    generator = torch.Generator().manual_seed(generator_seed)
    ids = torch.randint(3, 250, (rows, prompt + completion), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(rows):
        mask[row, : row % 3] = 0  # left padding of the prompt
        mask[row, prompt + completion - row % 4 :] = 0  # right padding of the completion
    return ids, mask, completion


def _trl_call(model, ids, mask, keep):
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -keep:], out.entropy[:, -keep:]


def test_eapo_forward_equals_trls_reference_then_policy_pass_with_shared_layers():
    """One step's calls as TRL makes them — the reference (adapter disabled, no grad), then the
    policy's loss pass — give the same log-probs, entropies, H_t, loss and LoRA gradients; with
    LoRA on layers 2-3 of 4, eapo's policy pass reuses layers 0-1 from the reference pass."""
    (trl_model, _), (eapo_model, head) = _lora_models()
    assert head.shared_layers == 2 and "layers 0-1 shared" in head.describe()
    ids, mask, keep = _batch()
    completion_mask = mask[:, -keep:]
    advantages = torch.linspace(-1.0, 1.0, ids.shape[0])[:, None]
    results = {}
    for name, model in (("trl", trl_model), ("eapo", eapo_model)):
        with torch.no_grad(), model.disable_adapter():
            ref_logps, _ = _trl_call(model, ids, mask, keep)
        logps, entropy = _trl_call(model, ids, mask, keep)
        # the paper's loss on this batch: -A·ratio (ratio = 1 at the first iteration) + β·k3 KL
        ratio = torch.exp(logps - logps.detach())
        kl = torch.exp(ref_logps - logps) - (ref_logps - logps) - 1
        per_token = -advantages * ratio + 0.04 * kl
        loss = ((per_token * completion_mask).sum(-1) / completion_mask.sum(-1)).mean()
        model.zero_grad()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        h_t = rollout_entropy(entropy.detach(), completion_mask)
        results[name] = (ref_logps, logps.detach(), entropy.detach(), h_t, loss.detach(), grads)
    assert head.calls == {"completion_head": 2, "shared_prefix_reused": 1, "delegated": 0}
    assert head.checked and head.shared_layers == 2  # the one-off check against the full forward passed
    (t_ref, t_lp, t_ent, t_h, t_loss, t_grads), (e_ref, e_lp, e_ent, e_h, e_loss, e_grads) = results.values()
    scored = completion_mask.bool()
    assert torch.allclose(e_ref[scored], t_ref[scored], atol=ATOL, rtol=0)
    assert torch.allclose(e_lp[scored], t_lp[scored], atol=ATOL, rtol=0)
    assert torch.allclose(e_ent[scored], t_ent[scored], atol=ATOL, rtol=0)
    assert (e_lp[~scored] == 0).all() and (t_lp[~scored] == 0).all()
    assert abs(e_h - t_h) < ATOL and abs(e_loss.item() - t_loss.item()) < 1e-5
    assert e_grads.keys() == t_grads.keys() and len(e_grads) == 12  # 3 modules x A, B x 2 layers
    for name, grad in t_grads.items():
        assert grad.abs().max() > 0, name
        assert torch.allclose(e_grads[name], grad, rtol=1e-4, atol=1e-6), name


def test_hidden_states_that_do_not_match_the_full_forward_switch_sharing_off(caplog):
    """The one-off check: cached hidden states that differ from the full forward (here corrupted, as an
    architecture whose forward is not embed-then-layers would give) are detected, sharing is switched
    off with a warning, and the pass returns the full forward's values."""
    (trl_model, _), (eapo_model, head) = _lora_models()
    ids, mask, keep = _batch(1)
    with torch.no_grad():
        with eapo_model.disable_adapter():
            _trl_call(eapo_model, ids, mask, keep)
        for key in head._cache:
            head._cache[key] = head._cache[key] + 0.5
        with caplog.at_level(logging.WARNING, logger="eapo.engines.trl.policy_forward"):
            logps, _ = _trl_call(eapo_model, ids, mask, keep)
        expected, _ = _trl_call(trl_model, ids, mask, keep)
    assert head.shared_layers == 0 and "switched off" in caplog.text
    scored = mask[:, -keep:].bool()
    assert torch.allclose(logps[scored], expected[scored], atol=ATOL, rtol=0)


def test_full_fine_tuning_and_other_inputs_share_nothing_and_fall_back_to_trl():
    """Nothing frozen (full fine-tune): no layers shared. Inputs eapo's forward does not handle
    (inputs_embeds, pre-shifted labels) go through TRL's forward, with the same result."""
    from trl.trainer.utils import add_fused_lm_head

    from eapo.engines.trl.policy_forward import frozen_prefix_layers, install_completion_head
    from eapo.runtime.models import build_tiny_model

    model, _ = build_tiny_model(num_layers=2, seed=4)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    assert frozen_prefix_layers(model) == 0
    head = install_completion_head(model, temperature=1.0, share_frozen_layers=True)
    ids, mask, keep = _batch(2)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-keep] = -100
    with torch.no_grad():
        ours = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        embeds = model.get_input_embeddings()(ids)
        theirs = model(inputs_embeds=embeds, attention_mask=mask, labels=labels, fused_lm_head=True)
    assert head.calls == {"completion_head": 1, "shared_prefix_reused": 0, "delegated": 1}
    assert torch.allclose(ours.log_probs, theirs.log_probs, atol=ATOL, rtol=0)
    assert torch.allclose(ours.entropy, theirs.entropy, atol=ATOL, rtol=0)
    assert abs(ours.loss.item() - theirs.loss.item()) < 1e-5


# ----------------------------------------------------------------------------------------------
# Through the recipe: two training steps with each head
# ----------------------------------------------------------------------------------------------


def test_training_with_eapos_forward_logs_the_same_steps_as_with_trls(tmp_path, caplog):
    """`eapo train` on the tiny model with LoRA on the last layer, 2 steps, lm_head=trl against
    lm_head=eapo (layer 0 shared): every logged step's loss, H_t, w+, reward and KL agree."""
    from eapo.config import load_config
    from eapo.train import run

    lines = {}
    for head in ("trl", "eapo"):
        config = load_config(
            ROOT / "configs" / "tiny.yaml",
            [
                "train.max_steps=2",
                "train.save_steps=0",
                "model.lora.enabled=true",
                "model.lora.layers=1",
                "model.lora.r=4",
                "model.lora.target_modules=[q_proj,v_proj,up_proj]",
                "algorithm.beta=0.04",
                f"train.lm_head={head}",
                "logging.plot=false",
                "logging.progress=false",
                "logging.tensorboard=false",
            ],
        )
        with caplog.at_level(logging.INFO, logger="eapo.engines.trl.trainer"):
            run_dir = run(config, tmp_path / head)
        lines[head] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert "log-probs: completion positions only, layer 0 shared with the reference" in caplog.text
    steps = [line for line in lines["eapo"] if "loss" in line]
    assert len(steps) == 2
    for ours, theirs in zip(steps, [line for line in lines["trl"] if "loss" in line], strict=True):
        assert ours["entropy/rollout"] == pytest.approx(
            ours["entropy/train"], rel=1e-4
        )  # H_t from the loss pass
        for key in ("loss", "entropy/rollout", "eapo/w_pos", "reward/mean", "kl"):
            assert ours[key] == pytest.approx(theirs[key], abs=1e-5, rel=1e-4), key
