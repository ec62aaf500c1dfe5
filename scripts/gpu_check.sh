#!/usr/bin/env bash
# The GPU check: one short command on a GPU machine with no package registry.
#
#   bash scripts/gpu_check.sh --build      # here: .gpu-check/ = the wheels eapo lacks there (< 64 MiB)
#   bash scripts/gpu_check.sh              # there, in the project's root (carry .gpu-check):
#   bash scripts/gpu_check.sh --dry-run    # here, on a CPU: the same steps, the sizes shrunk
#
# On the GPU machine it
#   1. installs the carried wheels into /tmp/site (no index, no deps) and prints what it imports;
#   2. runs the GPU-marked tests (pytest -m gpu);
#   3. trains EAPO for 10 steps in bf16 on random weights in Qwen2.5-0.5B's shape (configs/gpu_check.yaml,
#      the generate backend), asserting every loss is finite and the logged eapo/* metrics follow the rule;
#   4. runs bench/gpu.py: rollout tokens/s of generate and paged, step time, peak memory, each against the
#      roofline floor of the device's own matmul rate and memory bandwidth, measured in the same run.
# Everything it measures lands in $OUT (default build/gpu-check): gpu_check.json, gpu_check.md and a log
# per step. Each step has its own time limit, so the whole check ends within about 7 minutes.
# A user's own GPU machine: pip install -e . (no --build needed), then `bash scripts/gpu_check.sh --local`.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=gpu
case "${1:-}" in
    --build) MODE=build ;;
    --dry-run) MODE=dry ;;
    --local) MODE=local ;;
    "") ;;
    *) echo "usage: bash scripts/gpu_check.sh [--build | --dry-run | --local]" >&2; exit 2 ;;
esac
CARRY=.gpu-check
PY=${PYTHON:-python3}
[[ -x .venv/bin/python && $MODE != gpu ]] && PY=${PYTHON:-.venv/bin/python}

if [[ $MODE == build ]]; then
    rm -rf "$CARRY"; mkdir -p "$CARRY/wheels"
    "$PY" scripts/gpu_check_deps.py --download "$CARRY/wheels" || exit 1
    carry=$(du -sb "$CARRY" | cut -f1)
    tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    echo "gpu_check: $CARRY holds $(ls "$CARRY/wheels" | wc -l) wheels, $((carry / 1024)) KiB; with the working tree $(((carry + tree) / 1048576)) MiB travel (limit 64 MiB)"
    if (( carry + tree > 64 * 1048576 )); then echo "gpu_check: over 64 MiB" >&2; exit 1; fi
    exit 0
fi

OUT=${OUT:-$ROOT/build/gpu-check}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
STATUS=0
started=$(date +%s)
phase() { echo "== gpu_check [$(( $(date +%s) - started )) s] $*"; }

# 1. what it needs
if [[ $MODE == gpu ]]; then
    phase "install the carried wheels"
    [[ -d $CARRY/wheels ]] || { echo "gpu_check: no $CARRY/wheels (run --build here and carry $CARRY)" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$CARRY"/wheels/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$ROOT/src
else
    export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ $MODE == dry ]]; then
    phase "what the GPU machine would be carried"
    "$PY" scripts/gpu_check_deps.py --list > "$OUT/wheels.txt" || exit 1
    echo "$(wc -l < "$OUT/wheels.txt") wheels: $(tr '\n' ' ' < "$OUT/wheels.txt")"
fi
"$PY" - <<'EOF' | tee "$OUT/environment.txt" || exit 1
import platform, torch, transformers, trl, datasets, eapo
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"transformers {transformers.__version__}, trl {trl.__version__}, datasets {datasets.__version__}, eapo {eapo.__version__}")
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
EOF

if [[ $MODE == dry ]]; then
    MODEL=random:qwen2.5-mini; PROMPTS=2; GEN=2; NEW=8; STEPS=3; REPEATS=1; MB=4
    T_TESTS=300; T_TRAIN=300; T_BENCH=300
    EXTRA=(--allow-cpu)
else
    MODEL=random:qwen2.5-0.5b; PROMPTS=8; GEN=4; NEW=128; STEPS=10; REPEATS=2; MB=32
    T_TESTS=120; T_TRAIN=150; T_BENCH=90
    EXTRA=()
fi

# 2. the GPU-marked tests (skipped without CUDA)
phase "pytest -m gpu"
timeout "$T_TESTS" "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py tests/runtime/test_backends.py \
    2>&1 | tail -n 40 > "$OUT/tests.log"
rc=${PIPESTATUS[0]}
tail -n 3 "$OUT/tests.log"
# 5: every test deselected or skipped (no GPU); anything else but 0 is a failure
if [[ $rc -ne 0 && ! ($MODE == dry && $rc -eq 5) ]]; then echo "gpu_check: GPU tests failed (rc $rc)"; STATUS=1; fi

COMMON=(--model "$MODEL" --config configs/gpu_check.yaml --prompts "$PROMPTS" --generations "$GEN"
        --new-tokens "$NEW" --max-prompt-tokens 1024 --micro-batch-size "$MB" --dtype bfloat16)
[[ $MODE == dry ]] && COMMON=("${COMMON[@]/bfloat16/float32}")

# 3. EAPO for STEPS steps, asserted (bench/gpu.py --check; the step time and its floor come with it)
rm -rf "${TMPDIR:-/tmp}/eapo-gpu-check-runs"
phase "train EAPO $STEPS steps ($MODEL), checked"
timeout "$T_TRAIN" "$PY" bench/gpu.py "${COMMON[@]}" --backends "" --step-backends generate --steps "$STEPS" \
    --check --runs-dir "${TMPDIR:-/tmp}/eapo-gpu-check-runs" --json "$OUT/train.json" --markdown "$OUT/train.md" "${EXTRA[@]}" \
    > "$OUT/train.log" 2>&1
rc=$?
grep -E "ceilings|\[step\]|check" "$OUT/train.log"
if [[ $rc -ne 0 ]]; then echo "gpu_check: training check failed (rc $rc; $OUT/train.log)"; tail -n 20 "$OUT/train.log"; STATUS=1; fi

# 4. rollout throughput of each backend
phase "bench/gpu.py rollout"
timeout "$T_BENCH" "$PY" bench/gpu.py "${COMMON[@]}" --backends generate,paged --steps 0 --repeats "$REPEATS" \
    --json "$OUT/rollout.json" --markdown "$OUT/rollout.md" "${EXTRA[@]}" > "$OUT/rollout.log" 2>&1
rc=$?
grep -E "\[rollout\]" "$OUT/rollout.log"
if [[ $rc -ne 0 ]]; then echo "gpu_check: rollout bench failed (rc $rc; $OUT/rollout.log)"; tail -n 20 "$OUT/rollout.log"; STATUS=1; fi

phase "report"
"$PY" - "$OUT" "$MODE" "$STATUS" "$(( $(date +%s) - started ))" <<'EOF'
import json, sys
from pathlib import Path
out, mode, status, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def read(name):
    path = out / name
    return json.loads(path.read_text()) if path.exists() else None
report = {"mode": mode, "passed": status == 0, "seconds": seconds,
          "environment": (out / "environment.txt").read_text().strip() if (out / "environment.txt").exists() else None,
          "tests": (out / "tests.log").read_text().strip().splitlines()[-1:] if (out / "tests.log").exists() else None,
          "train": read("train.json"), "rollout": read("rollout.json")}
(out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
md = [f"# GPU check ({mode}): {'passed' if status == 0 else 'FAILED'} in {seconds} s", "", "```", report["environment"] or "", "```", "",
      f"GPU-marked tests: {(report['tests'] or ['not run'])[0]}", ""]
for name in ("train.md", "rollout.md"):
    if (out / name).exists():
        md += ["## " + ("EAPO steps, checked" if name == "train.md" else "Rollout throughput"), "", *(out / name).read_text().splitlines()[2:], ""]
(out / "gpu_check.md").write_text("\n".join(md) + "\n")
for name in ("train.md", "rollout.md", "environment.txt"):  # folded into gpu_check.md/.json (8 files come back)
    (out / name).unlink(missing_ok=True)
print(f"gpu_check: {'passed' if status == 0 else 'FAILED'} in {seconds} s; {out}/gpu_check.md")
EOF
exit $STATUS
