"""scripts/gpu_check.sh --dry-run in CI (the same steps as on a GPU machine, on this CPU with the sizes
shrunk), so the GPU check cannot rot between the rare GPU runs; the random-shape models it trains; the
roofline arithmetic the benches share (bench/roofline.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

from roofline import Ceilings, Shapes, lengths_from_summary, optimizer_cost  # noqa: E402


@pytest.mark.slow
def test_gpu_check_dry_run_trains_checks_and_benches(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "TMPDIR": str(tmp_path), "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mode"] == "dry" and report["passed"] is True
    # the wheels it would carry: exactly what scripts/gpu_check_deps.py finds missing on the GPU image
    from gpu_check_deps import needed

    carried = (out / "wheels.txt").read_text().split()
    assert carried == [f"{name}=={version}" for name, version in needed().items()]
    assert any(line.startswith("trl==") for line in carried) and not any(
        line.startswith(("torch==", "transformers==")) for line in carried
    )
    # the EAPO steps: every step checked against w+ = clip(w0 H_t / H_0, w_min, w_max)
    step = report["train"]["steps"]["generate"]
    check = step["check"]
    assert check["passed"] is True and check["steps"] == 3 and len(check["w_pos"]) == 3
    assert check["w_pos"][0] == pytest.approx(0.2)  # H_1 = H_0: w+ = w0 (configs/gpu_check.yaml)
    assert all(0.0 <= w <= 2.0 for w in check["w_pos"])
    assert step["floor"]["floor_s"] > 0 and step["x_floor"] == pytest.approx(
        step["median_step_s"] / step["floor"]["floor_s"]
    )
    assert report["train"]["settings"]["model"] == "random:qwen2.5-mini"
    # rollout throughput of both backends, each against its floor
    for backend in ("generate", "paged"):
        rollout = report["rollout"]["rollout"][backend]
        assert rollout["tokens_per_s"] > 0 and rollout["floor_s"] > 0, backend
        assert rollout["x_floor"] == pytest.approx(rollout["seconds_per_call"] / rollout["floor_s"], rel=1e-6)
    assert (out / "gpu_check.md").read_text().startswith("# GPU check (dry): passed")
    # at most 8 files come back from a GPU machine
    assert len(list(out.iterdir())) <= 8


def test_random_shapes_build_a_model_whose_every_id_decodes(tmp_path, monkeypatch):
    monkeypatch.setenv("EAPO_CACHE_DIR", str(tmp_path))
    from transformers import AutoConfig

    from eapo.config import ConfigError
    from eapo.runtime.models import RANDOM_SHAPES, load_tokenizer, resolve_model

    path = resolve_model("random:qwen2.5-mini")
    shape = RANDOM_SHAPES["qwen2.5-mini"]
    config = AutoConfig.from_pretrained(path)
    assert (config.model_type, config.vocab_size, config.num_hidden_layers) == ("qwen2", shape.vocab_size, 2)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    tokenizer = load_tokenizer(path)
    assert len(tokenizer) == shape.vocab_size  # no id the model can sample is unknown to the tokenizer
    assert tokenizer.decode(tokenizer("héllo </advice>")["input_ids"]) == "héllo </advice>"
    decoded = tokenizer.decode(list(range(256, shape.vocab_size - 8)))
    assert len(decoded) > 2 * (shape.vocab_size - 264) * 0.9  # padded ids decode to 2+ byte symbols
    assert resolve_model("random:qwen2.5-mini") == path  # built once, then reused
    # the real 0.5B shape is Qwen2.5-0.5B's config
    big = RANDOM_SHAPES["qwen2.5-0.5b"]
    assert (big.vocab_size, big.hidden_size, big.intermediate_size, big.num_layers) == (151936, 896, 4864, 24)
    with pytest.raises(ConfigError, match="random:qwen2.5-0.5b"):
        resolve_model("random:qwen9")


def _shapes(**overrides) -> Shapes:
    config = dict(
        hidden_size=8,
        num_hidden_layers=2,
        vocab_size=10,
        intermediate_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    config.update(overrides)
    return Shapes(SimpleNamespace(**config), weight_bytes=2)


def test_roofline_counts_bytes_and_flops_by_hand():
    shapes = _shapes()
    # per layer: q,o 8x8 each, k,v 8x4 each, MLP 3 x 8x16: 64+64+32+32+384 = 576; + LM head 80
    assert shapes.layer_params == 576 and shapes.matmul_params == 2 * 576 + 80
    assert shapes.weight_bytes == (2 * 576 + 80) * 2
    assert shapes.kv_bytes(3) == 2 * 2 * 1 * 4 * 3 * 2  # K and V, 2 layers, 1 kv head of 4, bf16
    # one row, prompt 2, 2 new tokens: step 0 attends to 3 tokens, step 1 to 4
    slow = Ceilings("cpu", "float32", flops_per_s=1e3, bytes_per_s=1e12, detail={})
    flops, bytes_, floor = shapes.decode_floor([2], [2], slow)
    per_token = 2 * 2 * 576 + 2 * 8 * 10
    attention = 2 * 4 * 2 * 4 * (3 + 4)  # layers x 2x2 x heads x head_dim x contexts
    assert flops == 2 * per_token + attention
    assert bytes_ == 2 * shapes.weight_bytes + shapes.kv_bytes(3 + 4)
    assert floor == pytest.approx(flops / 1e3)  # compute-bound at this rate
    starved = Ceilings("cpu", "float32", flops_per_s=1e18, bytes_per_s=1e3, detail={})
    assert shapes.decode_floor([2], [2], starved)[2] == pytest.approx(bytes_ / 1e3)
    # a row that finished stops costing FLOPs but every step still reads the weights
    two = shapes.decode_floor([2, 2], [2, 1], starved)
    assert two[1] == 2 * shapes.weight_bytes + shapes.kv_bytes(3 + 4 + 3)
    assert starved.bound(*two[:2]) == "memory" and slow.bound(*two[:2]) == "compute"
    # micro-batches read the weights again; AdamW moves 28 bytes a parameter
    assert shapes.forward_cost([2, 2], [1, 1], micro_batches=2)[1] == 2 * shapes.weight_bytes
    assert optimizer_cost(100) == (1000.0, 2800.0)
    assert lengths_from_summary(4, mean=10.0, longest=16) == [16, 8, 8, 8]
