#!/usr/bin/env bash
# EAPO, Qwen3-8B, RJUA-QA, the paper's setting on 4 GPUs (see _run_eapo_qwen3_8b.sh for what it needs).
# RJUA here: 169 train / 42 dev rows carved from the official valid split (the train file is missing).
exec "$(dirname "$0")/_run_eapo_qwen3_8b.sh" rjua "$@"
