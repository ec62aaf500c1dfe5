"""``eapo eval``: sample k responses per prompt, score them, and write the paper's metrics with 95% CIs."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

from eapo.commands.options import (
    BACKEND,
    JUDGE_API_KEY_ENV,
    JUDGE_BASE_URL,
    JUDGE_MODEL,
    NO_JUDGE,
    OVERRIDES,
    SAMPLES_PER_PROMPT,
    SCORERS,
    config_option,
    eval_option,
    given,
    judge_fields,
    output_dir_option,
    with_scorer_settings,
)


@with_scorer_settings
def eval_command(
    overrides: list[str] = OVERRIDES,
    model: str = typer.Option(
        None,
        "--model",
        "-m",
        help="A run directory (evaluates RUN_DIR/final with the run's data and reward settings), a model or "
        "LoRA-adapter directory, 'tiny', 'smollm2-135m-instruct' or a hub id.",
    ),
    config: Path = config_option(),
    output_dir: Path = output_dir_option("Where results go (default RUN_DIR/eval)."),
    data: str = typer.Option(
        None, "--data", help="Loader name: demo, rjua, cmd, medquad, jsonl, csv, parquet, hf:<name>."
    ),
    data_path: str = typer.Option(None, "--data-path", help="Dataset file or directory (see `eapo data`)."),
    split: str = eval_option("split"),
    limit: int = eval_option("limit"),
    prompt: str = typer.Option(
        None,
        "--prompt",
        help="Prompt template name or file (default: the run's training prompt, else the dataset's).",
    ),
    response_prefix: str = typer.Option(
        None,
        "--response-prefix",
        help="Text every response starts with, appended after the generation prompt (default: the "
        "run's data.response_prefix, e.g. '<think>'; '' for none).",
    ),
    max_prompt_tokens: int = typer.Option(None, "--max-prompt-tokens", help="Truncate longer questions."),
    k: int = SAMPLES_PER_PROMPT,
    temperature: float = eval_option("temperature"),
    top_p: float = typer.Option(None, "--top-p", help="Nucleus sampling (default: the run's, else 1.0)."),
    max_new_tokens: int = eval_option("max_new_tokens"),
    seed: int = typer.Option(0, "--seed", help="Seeds sampling and the bootstrap."),
    stop: list[str] = typer.Option(
        None,
        "--stop",
        help="A stop string (repeat for several): each answer ends at the first one it writes, which stays in "
        "it (default: the run's rollout.stop, else none).",
    ),
    no_stop: bool = typer.Option(
        False, "--no-stop", help="No stop strings, whatever the run's rollout.stop."
    ),
    batch_size: int = eval_option("batch_size"),
    backend: str = BACKEND,
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, bfloat16, float16."),
    scorers: str = SCORERS,
    scorer_settings: dict[str, str] | None = None,
    judge_base_url: str = JUDGE_BASE_URL,
    judge_model: str = JUDGE_MODEL,
    judge_api_key_env: str = JUDGE_API_KEY_ENV,
    no_judge: bool = NO_JUDGE,
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples for the 95% intervals."),
) -> None:
    """Evaluate a model or a run: Rouge-L, Reranker, RL@k, RR@k, LAAJ, Avg with 95% bootstrap CIs.

    --model is a run directory (its configuration applies), a model or a hub id; --config alone
    evaluates that config's base model. The overrides apply to the run's or --config's configuration.

    Writes results.json, results.csv, results.md and samples.jsonl; rerunning resumes.
    """
    from eapo.config import ConfigError
    from eapo.evaluation import EvalError, EvalMismatchError, EvalSettings, run_eval

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if no_stop and stop:
        typer.echo("error: --stop and --no-stop contradict each other; give one", err=True)
        raise typer.Exit(2)
    settings = EvalSettings(
        **given(
            data=data,
            data_path=data_path,
            split=split,
            limit=limit,
            prompt=prompt,
            response_prefix=response_prefix,
            max_prompt_tokens=max_prompt_tokens,
            k=k,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            backend=backend,
            scorers=scorers,
        ),
        scorer_settings=scorer_settings,
        seed=seed,
        stop=() if no_stop else (tuple(stop) if stop else None),
        dtype=dtype,
        n_resamples=bootstrap,
        **judge_fields(judge_base_url, judge_model, judge_api_key_env, no_judge),
    )
    try:
        results, out = run_eval(
            settings,
            model=model,
            config=config,
            output_dir=output_dir,
            overrides=overrides or [],
            progress=True,
        )
    except ConfigError as error:  # a setting of the run's or --config's configuration
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    except (EvalError, EvalMismatchError, ValueError, FileNotFoundError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo((out / "results.md").read_text(encoding="utf-8"))
    typer.echo(f"results: {out / 'results.json'}")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
