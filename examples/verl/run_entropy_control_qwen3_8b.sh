#!/usr/bin/env bash
# An entropy control beside EAPO, in the paper's setting otherwise (see _run_eapo_qwen3_8b.sh):
# GRPO's weights (1, 1) plus one control, eapo's preset of that name.
#
# Usage: run_entropy_control_qwen3_8b.sh PRESET rjua|cmd [more hydra overrides...]
#   PRESET: entropy_bonus (PPO, entropy_coef 0.01), adaptive_entropy (Skywork-OR1, target = H_0),
#           clip_higher (DAPO, epsilon_high 0.28), clip_cov / kl_cov (Cui et al. 2025, verl's
#           defaults), top_entropy (Wang et al. 2025, the top 20% of tokens by entropy),
#           entropic (EntroPIC, Yang et al. 2025: PI-controlled weights, target = H_0)
# e.g. run_entropy_control_qwen3_8b.sh clip_cov rjua +algorithm.eapo.clip_cov_ratio=1e-3
set -euo pipefail
PRESET=${1:?usage: $0 PRESET rjua|cmd [hydra overrides...]}
shift
EAPO_METHOD=${PRESET} exec "$(dirname "$0")/_run_eapo_qwen3_8b.sh" "$@"
