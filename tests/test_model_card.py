"""The run's model card (RUN_DIR/README.md and final/README.md) names the base model, not "None"."""

from __future__ import annotations

import json
from pathlib import Path

from eapo.config import load_config
from eapo.train import base_model_id, run

ROOT = Path(__file__).resolve().parents[1]
FAST = ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false"]


def test_base_model_id():
    assert base_model_id("smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_model_id("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    assert base_model_id("tiny") == "tiny"


def test_model_card_names_the_base_model(tmp_path, monkeypatch):
    # The embedded SmolLM2 is loaded from a local dequantised directory, so TRL alone would write
    # "fine-tuned version of [None]". The tiny model stands in for it here (same local-directory path).
    monkeypatch.setattr("eapo.train.base_model_id", lambda name: "HuggingFaceTB/SmolLM2-135M-Instruct")
    config = load_config(
        ROOT / "configs" / "tiny.yaml",
        [*FAST, "train.max_steps=1", "train.save_steps=1", "model.lora.enabled=true"],
    )
    run_dir = run(config, tmp_path / "run")
    for card in (run_dir / "README.md", run_dir / "final" / "README.md"):
        text = card.read_text(encoding="utf-8")
        assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct\n" in text, card
        assert (
            "fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct]"
            "(https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)" in text
        ), card
        assert f'pipeline("text-generation", model="{run_dir / "final"}"' in text, card  # the quick start
        assert "None" not in text, card
    # the adapter still points at the local weights it was trained from (offline loading, eval)
    adapter = json.loads((run_dir / "final" / "adapter_config.json").read_text())
    assert Path(adapter["base_model_name_or_path"]).is_dir()
