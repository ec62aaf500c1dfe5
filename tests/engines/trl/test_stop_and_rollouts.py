"""Stop strings and rollouts.jsonl on the TRL engine, end to end on the tiny random model.

The tiny model writes random bytes, so it cannot be steered to a tag; the stop strings are the 26 lowercase
letters, one of which it writes within a few tokens in most rollouts (a byte-level vocabulary: each letter is
one token, so here the completing token never straddles; tests/runtime/test_stop.py holds the straddling
rule on every backend's cutting code). vLLM's side is folded into tests/engines/trl/test_vllm.py's runs.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest

from eapo.config import load_config
from eapo.run_dir import ROLLOUT_KEYS, read_metrics, read_rollouts
from eapo.runtime.stop import first_stop
from eapo.train import run

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "configs" / "tiny.yaml"
FAST = ["logging.progress=false", "logging.plot=false", "logging.tensorboard=false", "train.save_steps=0"]
LETTERS = list(string.ascii_lowercase)
STOP = "rollout.stop=[" + ",".join(repr(letter) for letter in LETTERS) + "]"


def check_step_against_its_metrics(rows: list[dict], metrics: dict, group: int = 4) -> None:
    """One step's rollouts.jsonl lines agree with its metrics.jsonl line."""
    assert all(set(row) == set(ROLLOUT_KEYS) for row in rows)
    assert [(row["prompt_index"], row["sample"]) for row in rows] == [
        (i // group, i % group) for i in range(len(rows))
    ]
    totals = [row["reward"] for row in rows if row["reward"] is not None]
    assert sum(totals) / len(totals) == pytest.approx(metrics["reward"], rel=1e-6, abs=1e-9)
    scored = [row for row in rows if row["polarity"] is not None]
    positive = sum(row["polarity"] == "D+" for row in scored)
    assert positive / len(scored) == pytest.approx(metrics["eapo/frac_positive"], rel=1e-9)
    for row in scored:
        expected = metrics["eapo/w_pos"] if row["polarity"] == "D+" else metrics["eapo/w_neg"]
        assert row["weight"] == pytest.approx(expected, rel=1e-9)
        # D+ gets a non-negative advantage, D- a non-positive one (the split is at the group mean)
        assert row["advantage"] >= -1e-6 if row["polarity"] == "D+" else row["advantage"] <= 1e-6
    shares = {
        reason: sum(row["stop_reason"] == reason for row in rows) / len(rows)
        for reason in ("string", "eos", "cap")
    }
    for reason, share in shares.items():
        assert metrics[f"completions/stopped_by_{reason}"] == pytest.approx(share, rel=1e-6)


@pytest.mark.parametrize("backend", ["generate", "paged"])
def test_stop_strings_end_every_rollout_and_rollouts_jsonl_matches_the_metrics(backend, tmp_path):
    config = load_config(
        TINY, [*FAST, STOP, f"rollout.backend={backend}", "logging.rollouts=1", "train.max_steps=2"]
    )
    run_dir = run(config, tmp_path / "run")
    metrics = read_metrics(run_dir)
    rollouts = read_rollouts(run_dir)
    assert [row["step"] for row in rollouts] == [1] * 8 + [2] * 8
    for step in (1, 2):
        check_step_against_its_metrics([r for r in rollouts if r["step"] == step], metrics[step - 1])
    ended = [row for row in rollouts if row["stop_reason"] == "string"]
    assert len(ended) >= 8  # a letter within 24 random bytes: most rollouts
    for row in rollouts:
        found = first_stop(row["completion"], LETTERS)
        if row["stop_reason"] == "string":
            # the text ends with the stop string, and the first one it holds is that one
            assert found is not None and found[0] == len(row["completion"])
        else:
            assert found is None  # no stop string anywhere in a rollout that ended otherwise
    for row in metrics:
        total = sum(row[f"completions/stopped_by_{reason}"] for reason in ("string", "eos", "cap"))
        assert total == pytest.approx(1.0)
        # the rollout lengths are the cut ones: a rollout cut at a letter is shorter than the cap
        assert row["completion/mean_length"] < 24


def test_without_stop_strings_nothing_is_cut_and_rollouts_are_written_every_n_steps(tmp_path):
    config = load_config(TINY, [*FAST, "logging.rollouts=2", "train.max_steps=3"])
    run_dir = run(config, tmp_path / "run")
    metrics = read_metrics(run_dir)
    rollouts = read_rollouts(run_dir)
    assert {row["step"] for row in rollouts} == {2}  # every 2nd step of 3
    check_step_against_its_metrics(rollouts, metrics[1])
    assert all(row["completions/stopped_by_string"] == 0.0 for row in metrics)
    assert {row["stop_reason"] for row in rollouts} <= {"eos", "cap"}
    # each component of the composite (format 0.2, rouge_l 0.8), and the total as their weighted sum
    for row in rollouts:
        assert set(row["rewards"]) == {"format", "rouge_l"}
        expected = 0.2 * row["rewards"]["format"] + 0.8 * row["rewards"]["rouge_l"]
        assert row["reward"] == pytest.approx(expected, rel=1e-6)  # TRL holds rewards in float32
    default = run(load_config(TINY, [*FAST, "train.max_steps=1"]), tmp_path / "default")
    assert not (default / "rollouts.jsonl").exists()  # off by default


def _dataset(n: int = 4):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"Question {i}: what helps a cold?"} for i in range(n)])


def _shortness(completions, **kwargs):
    return [1.0 / (1.0 + len(c)) for c in completions]


def test_a_trl_script_stops_at_strings_and_writes_rollouts_through_eapo_config(tmp_path):
    from eapo import EAPOConfig, EAPOTrainer
    from eapo.runtime.models import resolve_model

    args = EAPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        max_steps=2,
        per_device_train_batch_size=8,
        max_completion_length=16,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        stop=LETTERS,
        log_rollouts=1,
    )
    trainer = EAPOTrainer(
        model=resolve_model("tiny"), reward_funcs=_shortness, args=args, train_dataset=_dataset()
    )
    trainer.train()
    rollouts = read_rollouts(tmp_path / "out")
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [row["step"] for row in rollouts] == [1] * 8 + [2] * 8
    for row in rollouts:
        assert set(row["rewards"]) == {"_shortness"}  # a plain reward function: its own name
        assert row["rewards"]["_shortness"] == pytest.approx(1.0 / (1.0 + len(row["completion"])))
        if row["stop_reason"] == "string":
            assert row["completion"][-1] in LETTERS
    for step, log in enumerate(logs, start=1):
        mine = [row for row in rollouts if row["step"] == step]
        assert sum(r["reward"] for r in mine) / 8 == pytest.approx(log["reward"], rel=1e-6)
        assert log["completions/stopped_by_string"] == pytest.approx(
            sum(r["stop_reason"] == "string" for r in mine) / 8
        )
    assert logs[0]["completions/stopped_by_string"] > 0


def test_eapo_config_passes_stop_strings_to_vllm_and_refuses_what_would_drop_them():
    from eapo import EAPOConfig

    server = EAPOConfig(
        output_dir="unused", use_cpu=True, use_vllm=True, vllm_mode="server", stop=["</advice>"]
    )
    assert server.generation_kwargs == {"stop": ["</advice>"], "include_stop_str_in_output": True}
    assert EAPOConfig(output_dir="unused", use_cpu=True, stop=["</advice>"]).generation_kwargs is None
    with pytest.raises(ValueError, match="mask_truncated_completions=True with stop strings"):
        EAPOConfig(output_dir="unused", use_cpu=True, stop=["</advice>"], mask_truncated_completions=True)
    with pytest.raises(ValueError, match="disagree"):
        EAPOConfig(
            output_dir="unused", use_cpu=True, use_vllm=True, stop=["a"], generation_kwargs={"stop": ["b"]}
        )
    with pytest.raises(ValueError, match="EAPOConfig.stop must be a list"):
        EAPOConfig(output_dir="unused", use_cpu=True, stop="</advice>")
    with pytest.raises(ValueError, match="EAPOConfig.log_rollouts"):
        EAPOConfig(output_dir="unused", use_cpu=True, log_rollouts=-1)


def test_trls_vllm_server_client_sends_the_stop_strings(monkeypatch):
    """Server mode needs CUDA (TRL sends the weights over NCCL): here the request TRL's client would post
    to `trl vllm-serve` carries the stop strings EAPOConfig put into generation_kwargs."""
    from trl.generation.vllm_client import VLLMClient

    from eapo import EAPOConfig

    args = EAPOConfig(
        output_dir="unused", use_cpu=True, use_vllm=True, vllm_mode="server", stop=["</advice>"]
    )
    sent = {}

    def post(self, url, json):
        sent.update(json)
        return {"choices": [{"prompt_token_ids": [1], "token_ids": [2], "logprobs": None}]}

    monkeypatch.setattr(VLLMClient, "_post", post)
    client = VLLMClient.__new__(VLLMClient)
    client.base_url, client.model = "http://unused", "m"
    try:
        client.generate(prompts=[[1]], n=1, generation_kwargs=args.generation_kwargs)
    except Exception:  # parsing the fake reply may fail after the request was built
        pass
    assert sent["stop"] == ["</advice>"] and sent["include_stop_str_in_output"] is True
