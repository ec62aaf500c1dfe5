#!/usr/bin/env bash
# EAPO, Qwen3-8B, CMD, the paper's setting on 4 GPUs (see _run_eapo_qwen3_8b.sh for what it needs).
# CMD here: Internal Medicine only, 6,212 train / 327 dev rows carved from train.jsonl.
exec "$(dirname "$0")/_run_eapo_qwen3_8b.sh" cmd "$@"
