#!/usr/bin/env bash
# EAPO on verl 0.9.x with the paper's setting (Section 5.1): Qwen3-8B on 4 GPUs, train batch 32,
# n = 4 rollouts per prompt, max prompt and response length 2048, 10 epochs, lr 1e-6, KL loss
# (low_var_kl, coefficient 0.001), seq-mean-token-mean loss aggregation, clip 0.2, and EAPO's
# w0 = 0.2, w_min = 0, w_max = 2 (w- = 1). Called by run_eapo_qwen3_8b_{rjua,cmd}.sh.
#
# Needs: 4 GPUs, `pip install 'eapo[verl]'` plus verl's vLLM extra (`pip install 'verl[vllm]'`),
# and an OpenAI-compatible endpoint serving the LLM judge (the paper uses DeepSeek-V3.2).
#
# Usage: _run_eapo_qwen3_8b.sh rjua|cmd [more hydra overrides...]
# Environment (defaults in brackets):
#   MODEL_PATH [Qwen/Qwen3-8B]                 DATA_DIR [data/verl/<dataset>]
#   JUDGE_BASE_URL [http://localhost:8000/v1]  JUDGE_MODEL [deepseek-chat]
#   JUDGE_API_KEY_ENV [OPENAI_API_KEY]: the NAME of the variable holding the judge's key ("null": none)
#   EAPO_DATA_DIR: where `eapo data export-verl` reads the datasets (../shared/data in this repo)
#   PRINT_ARGS=1: print the verl arguments, one per line, and exit (used by tests/engines/verl)
#   EAPO_METHOD [eapo]: eapo (the paper), or an entropy-control preset on GRPO's weights (1, 1):
#     entropy_bonus, adaptive_entropy, clip_higher, clip_cov, kl_cov or top_entropy (run by
#     algorithm.adv_estimator=eapo_grpo; see eapo.engines.verl.entropy_control and
#     run_entropy_control_qwen3_8b.sh)
# A control composes with EAPO's weights as a further override, e.g. EAPO + DAPO's clip-higher:
#   run_eapo_qwen3_8b_rjua.sh +algorithm.eapo.epsilon_high=0.28
# (eapo writes it into actor_rollout_ref.actor.clip_ratio_high; setting that option to another value
# than verl's default beside it is refused).
# Not set here because the paper does not say: ppo_mini_batch_size (= the train batch: one update
# per batch), micro-batching (dynamic, 16k tokens per GPU), vLLM tensor parallel size (2).
set -euo pipefail

DATASET=${1:?usage: $0 rjua|cmd [hydra overrides...]}
shift
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}
DATA_DIR=${DATA_DIR:-data/verl/${DATASET}}
JUDGE_BASE_URL=${JUDGE_BASE_URL:-http://localhost:8000/v1}
JUDGE_MODEL=${JUDGE_MODEL:-deepseek-chat}
JUDGE_API_KEY_ENV=${JUDGE_API_KEY_ENV:-OPENAI_API_KEY}
EAPO_METHOD=${EAPO_METHOD:-eapo}

if [[ "${EAPO_METHOD}" == eapo ]]; then
    # EAPO: polarity-weighted GRPO advantages, w+ from the rollout entropy (eapo.engines.verl)
    method_args=(
        algorithm.adv_estimator=eapo
        +algorithm.eapo.w0=0.2
        +algorithm.eapo.w_min=0.0
        +algorithm.eapo.w_max=2.0
        +algorithm.eapo.w_neg=1.0
    )
    EXPERIMENT=eapo_qwen3_8b_${DATASET}
else
    # a preset: GRPO's weights (1, 1) through eapo's estimator, plus the control's settings
    method_args=(algorithm.adv_estimator=eapo_grpo "+algorithm.eapo.method=${EAPO_METHOD}")
    EXPERIMENT=${EAPO_METHOD}_qwen3_8b_${DATASET}
fi

args=(
    # data: written by `eapo data export-verl` (prompt = the paper's template, ground truth, question)
    data.train_files="${DATA_DIR}/train.parquet"
    data.val_files="${DATA_DIR}/dev.parquet"
    data.train_batch_size=32
    data.max_prompt_length=2048
    data.max_response_length=2048
    data.filter_overlong_prompts=True
    data.truncation=error
    # policy
    actor_rollout_ref.model.path="${MODEL_PATH}"
    actor_rollout_ref.model.use_remove_padding=True
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_mini_batch_size=32
    actor_rollout_ref.actor.use_dynamic_bsz=True
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384
    actor_rollout_ref.actor.use_kl_loss=True
    actor_rollout_ref.actor.kl_loss_coef=0.001
    actor_rollout_ref.actor.kl_loss_type=low_var_kl
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.clip_ratio_low=0.2
    actor_rollout_ref.actor.clip_ratio_high=0.2
    actor_rollout_ref.actor.entropy_coeff=0
    # the rest of the objective, written out (verl's defaults where the paper is silent, except the
    # weight decay: eapo's and TRL's 0, not verl's 0.01, so both engines run one objective)
    actor_rollout_ref.actor.ppo_epochs=1
    actor_rollout_ref.actor.optim.weight_decay=0.0
    actor_rollout_ref.actor.grad_clip=1.0
    actor_rollout_ref.actor.optim.clip_grad=1.0
    algorithm.rollout_correction.rollout_is=null
    # numerics: bf16 compute under FSDP (verl's default, written out), fp32 gradient reduction, bf16 rollouts
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}"
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:bf16,reduce_dtype:fp32,buffer_dtype:fp32}"
    actor_rollout_ref.rollout.dtype=bfloat16
    # rollouts
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.n=4
    actor_rollout_ref.rollout.tensor_model_parallel_size=2
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6
    # the method (EAPO_METHOD above), the eapo trainer
    "${method_args[@]}"
    algorithm.use_kl_in_reward=False
    algorithm.norm_adv_by_std_in_grpo=True
    +algorithm.eapo.entropy_agg=token-mean  # H_t as on TRL (eapo.core.rollout_entropy), not loss_agg_mode
    trainer.use_v1=True
    trainer.v1.trainer_mode=eapo
    # reward: α·(format, Rouge-L, reranker, LLM judge), eapo.rewards via eapo.engines.verl.compute_score
    reward.custom_reward_function.path=pkg://eapo.engines.verl
    reward.custom_reward_function.name=compute_score
    "+reward.custom_reward_function.reward_kwargs.options.llm_judge.base_url='${JUDGE_BASE_URL}'"
    "+reward.custom_reward_function.reward_kwargs.options.llm_judge.model='${JUDGE_MODEL}'"
    "+reward.custom_reward_function.reward_kwargs.options.llm_judge.api_key_env=${JUDGE_API_KEY_ENV}"
    # run
    trainer.n_gpus_per_node=4
    trainer.nnodes=1
    trainer.total_epochs=10
    trainer.critic_warmup=0
    trainer.val_before_train=True
    trainer.test_freq=5
    trainer.save_freq=10
    trainer.logger='["console","tensorboard"]'
    trainer.project_name=eapo
    trainer.experiment_name="${EXPERIMENT}"
)

if [[ -n "${PRINT_ARGS:-}" ]]; then
    printf '%s\n' "${args[@]}" "$@"
    exit 0
fi

if [[ ! -f "${DATA_DIR}/train.parquet" ]]; then
    eapo data export-verl "${DATASET}" --out "${DATA_DIR}" --split train --split dev
fi

exec python3 -m verl.trainer.main_ppo "${args[@]}" "$@"
