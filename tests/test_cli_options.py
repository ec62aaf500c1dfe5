"""One command line (issue 48): ``--config``, the overrides, ``--engine``, the judge options, what an
evaluation samples (``--k``, ``--eval-*``, ``--backend``) and how a sweep runs (``--seeds``, ``--jobs``,
``--report-only``, ``--output-dir``) are declared once (:mod:`eapo.commands.options`) and parse the same
in every command that takes them; ``eapo weights``'s options are generated from core's declarations."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from eapo.cli import app
from eapo.commands import options
from eapo.config import ConfigError, load_config, packaged_config, preset_names, resolve_config
from eapo.core import WEIGHT_SETTINGS, WEIGHTING_SCHEMES
from eapo.evaluation import EvalSettings, default_scorers
from eapo.rewards.registry import scorer_settings

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"

#: The arguments each command needs besides the one under test.
REQUIRED = {"train": [], "eval": [], "sweep": ["--output-dir", "out"], "study": ["--output-dir", "out"]}
CONFIG_COMMANDS = list(REQUIRED)
#: Which shared option each command attaches (its parameter name in every command).
SHARED = {
    "config": ["train", "eval", "sweep", "study"],
    "overrides": ["train", "eval", "sweep", "study"],
    "engine": ["train", "sweep", "study"],
    "judge_base_url": ["eval", "sweep"],
    "judge_model": ["eval", "sweep"],
    "judge_api_key_env": ["eval", "sweep"],
    "no_judge": ["eval", "sweep"],
    "scorers": ["eval", "sweep"],
    "rouge_level": ["eval", "sweep", "study"],  # generated from the scorers' registrations
    "reranker_backend": ["eval", "sweep", "study"],
    "backend": ["eval", "sweep", "study"],
    "k": ["eval", "sweep", "study"],
    "eval_split": ["sweep", "study"],
    "eval_limit": ["sweep", "study"],
    "eval_temperature": ["sweep", "study"],
    "eval_max_new_tokens": ["sweep", "study"],
    "eval_batch_size": ["sweep", "study"],
    "seeds": ["sweep", "study"],
    "jobs": ["sweep", "study"],
    "report_only": ["sweep", "study"],
}


@pytest.fixture(scope="module")
def commands():
    return typer.main.get_command(app).commands


def parse(commands, name: str, *args: str) -> dict:
    """The parameters ``eapo NAME ARGS`` hands its function (every callback run, nothing invoked)."""
    return commands[name].make_context(name, [*args, *REQUIRED[name]]).params


def param(commands, command: str, name: str):
    (found,) = [p for p in commands[command].params if p.name == name]
    return found


# --- --config: one resolution -----------------------------------------------------------------


def test_a_preset_name_resolves_to_the_packaged_file_and_a_file_of_that_name_wins(tmp_path, monkeypatch):
    demo = packaged_config("demo")
    assert demo.name == "demo.yaml" and demo.parent.name == "configs" and demo.is_file()
    assert resolve_config("demo") == resolve_config("demo.yaml") == resolve_config(Path("demo")) == demo
    assert resolve_config(TINY) == TINY
    monkeypatch.chdir(tmp_path)
    Path("tiny.yaml").write_text("train: {max_steps: 1}\n", encoding="utf-8")
    assert resolve_config("tiny.yaml") == Path("tiny.yaml")  # the file here, not the preset
    assert resolve_config("tiny") == packaged_config("tiny")
    assert load_config("tiny.yaml").train.max_steps == 1
    assert load_config("tiny") == load_config(TINY)  # the library reads --config as the CLI does


def test_neither_a_file_nor_a_preset_is_one_error_that_lists_every_preset(tmp_path):
    names = preset_names()
    assert {"demo", "demo_gpu", "tiny", "paper_rjua", "paper_cmd", "study", "study_cpu"} <= set(names)
    listed = f"give a YAML file or one of the presets: {', '.join(names)}"
    with pytest.raises(ConfigError) as error:
        resolve_config("nosuch")
    assert (
        str(error.value) == f"config 'nosuch' does not exist, and no packaged preset has that name; {listed}"
    )
    with pytest.raises(ConfigError, match=f"config '{tmp_path}' is a folder, and no packaged preset"):
        resolve_config(tmp_path)
    with pytest.raises(ConfigError, match="configs/nosuch.yaml' does not exist"):
        load_config("configs/nosuch.yaml")
    with pytest.raises(ConfigError, match="no packaged preset 'nosuch'; presets: demo, demo_gpu"):
        packaged_config("nosuch")


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_every_command_resolves_config_as_train_does(commands, command, tmp_path):
    assert parse(commands, command, "--config", "demo")["config"] == packaged_config("demo")
    assert parse(commands, command, "-c", "study_cpu.yaml")["config"] == packaged_config("study_cpu")
    assert parse(commands, command, "--config", str(TINY))["config"] == TINY
    with pytest.raises(typer.BadParameter) as error:
        parse(commands, command, "--config", str(tmp_path / "missing.yaml"))
    assert "does not exist, and no packaged preset has that name" in error.value.format_message()
    assert f"presets: {', '.join(preset_names())}" in error.value.format_message()


def test_only_the_default_config_differs_by_command(commands):
    defaults = {name: parse(commands, name)["config"] for name in CONFIG_COMMANDS}
    assert defaults == {
        "train": packaged_config("demo"),
        "eval": None,  # eval evaluates --model with its run's configuration
        "sweep": packaged_config("demo"),  # was required; now eapo train's default
        "study": packaged_config("study"),
    }


def test_a_missing_config_exits_2_naming_the_presets_in_eval_as_in_train():
    for command in ("train", "eval"):
        out = subprocess.run(
            [sys.executable, "-m", "eapo.cli", command, "--config", "nosuch"],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "400"},
        )
        assert out.returncode == 2, out.stderr
        assert "config 'nosuch' does not exist, and no packaged preset has that name" in out.stderr
        assert "demo, demo_gpu" in out.stderr and "tiny" in out.stderr


# --- the shared options: declared once, parsed the same ----------------------------------------


def kind(p) -> tuple:
    """A parameter's type and range."""
    return (p.type_descriptor.annotation, getattr(p, "min", None), getattr(p, "max", None))


def declaration(p) -> tuple:
    """What a parameter is, as its commands parse it and show it in --help."""
    return (
        tuple(p.opts),
        tuple(p.secondary_opts),
        p.help,
        kind(p),
        p.required,
        p.metavar,
        p.show_default,
    )


@pytest.mark.parametrize("name", list(SHARED))
def test_a_shared_option_has_one_spelling_and_one_help_in_every_command(commands, name):
    found = {command: param(commands, command, name) for command in SHARED[name]}
    spellings = {(tuple(p.opts), tuple(p.secondary_opts)) for p in found.values()}
    helps = {p.help for p in found.values()}
    assert len(spellings) == 1 and len(helps) == 1, (spellings, helps)
    assert len({declaration(p) for p in found.values()}) == 1
    if name != "config":  # only --config's default differs by command (test_only_the_default_config_...)
        assert len({repr(p.default) for p in found.values()}) == 1, {c: p.default for c, p in found.items()}
    assert [command for command in CONFIG_COMMANDS if command not in SHARED[name]] == [
        command for command in CONFIG_COMMANDS if not [p for p in commands[command].params if p.name == name]
    ]  # and no command declares it on its own
    if name == "config":
        assert spellings == {(("--config", "-c"), ())} and helps == {options.CONFIG_HELP}


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_overrides_parse_the_same_in_every_command(commands, command):
    given = ["algorithm.w0=0.3", "reward.judge.api_key_env=null"]
    assert parse(commands, command, *given)["overrides"] == given
    assert parse(commands, command)["overrides"] == []
    with pytest.raises(typer.BadParameter, match="'novalue' must look like section.key=value"):
        parse(commands, command, "novalue")


@pytest.mark.parametrize("command", ["train", "sweep", "study"])
def test_engine_is_one_override_in_every_command(commands, command):
    params = parse(commands, command, "--engine", "verl", "train.max_steps=2")
    assert options.with_engine(params["overrides"], params["engine"]) == ["train.max_steps=2", "engine=verl"]
    assert options.with_engine(None, None) == []


JUDGE_ARGS = ["--judge-base-url", "http://127.0.0.1:8011/v1", "--judge-model", "judge"]
JUDGE_ARGS += ["--judge-api-key-env", "", "--no-judge"]
JUDGE_PARAMS = {
    "judge_base_url": "http://127.0.0.1:8011/v1",
    "judge_model": "judge",
    "judge_api_key_env": "",
    "no_judge": True,
}


def test_the_judge_options_parse_identically_in_eval_and_sweep(commands):
    for command in ("eval", "sweep"):
        params = parse(commands, command, *JUDGE_ARGS)
        assert {key: params[key] for key in JUDGE_PARAMS} == JUDGE_PARAMS
        unset = parse(commands, command)
        assert [unset[key] for key in JUDGE_PARAMS] == [None, None, None, False]
    assert options.judge_fields("http://127.0.0.1:8011/v1", "judge", "", True) == {
        "judge_base_url": "http://127.0.0.1:8011/v1",
        "judge_model": "judge",
        "judge_api_key_env": "",
        "judge": False,
    }


def test_the_judge_options_reach_the_evaluation_settings_alike(monkeypatch, tmp_path):
    """eapo eval hands them to run_eval, eapo sweep to every evaluation: the same EvalSettings fields."""
    import eapo.evaluation as evaluation
    import eapo.sweep as sweep

    seen = {}

    def fake_run_eval(settings, **target):
        seen["eval"] = settings
        (tmp_path / "results.md").write_text("table\n", encoding="utf-8")
        return {}, tmp_path

    def fake_run_sweep(config, output_dir, **kwargs):
        seen["sweep"] = kwargs["eval_options"]
        seen["sweep config"] = config
        raise sweep.SweepError("stop here")

    monkeypatch.setattr(evaluation, "run_eval", fake_run_eval)
    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    result = CliRunner().invoke(app, ["eval", "--config", "tiny", *JUDGE_ARGS])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["sweep", "--output-dir", str(tmp_path), *JUDGE_ARGS])
    assert result.exit_code == 2 and "stop here" in result.output
    judge = {"judge_base_url": "http://127.0.0.1:8011/v1", "judge_model": "judge", "judge_api_key_env": ""}
    assert seen["eval"] == EvalSettings(**judge, judge=False)
    assert seen["sweep"] == EvalSettings(**judge, judge=False)
    assert seen["sweep"].cli_args()[-7:] == ["--judge-base-url", "http://127.0.0.1:8011/v1", "--judge-model",
                                             "judge", "--judge-api-key-env", "", "--no-judge"]  # fmt: skip
    assert seen["sweep config"] == packaged_config("demo")


# --- what an evaluation samples and how a sweep runs: one default, stated once ----------------------

#: A value for each shared evaluation and sweep option, and what the command's function receives.
GIVEN = {
    "k": (["--k", "4"], 4),
    "backend": (["--backend", "transformers"], "transformers"),
    "eval_split": (["--eval-split", "test"], "test"),
    "eval_limit": (["--eval-limit", "3"], 3),
    "eval_temperature": (["--eval-temperature", "0.5"], 0.5),
    "eval_max_new_tokens": (["--eval-max-new-tokens", "16"], 16),
    "eval_batch_size": (["--eval-batch-size", "2"], 2),
    "seeds": (["--seeds", "0,3"], "0,3"),
    "jobs": (["-j", "2"], 2),
    "report_only": (["--report-only"], True),
}
#: A value below the range of each option that has one.
BELOW_RANGE = {"k": "0", "eval_limit": "0", "eval_temperature": "-1", "eval_max_new_tokens": "0"}
BELOW_RANGE |= {"eval_batch_size": "0", "jobs": "0"}


@pytest.mark.parametrize(
    "name, command",
    [(name, command) for name in GIVEN for command in SHARED[name]],
    ids=[f"{name}-{command}" for name in GIVEN for command in SHARED[name]],
)
def test_every_command_that_shares_an_option_accepts_it_and_leaves_it_unset_by_default(
    commands, name, command
):
    args, value = GIVEN[name]
    assert parse(commands, command, *args)[name] == value
    assert parse(commands, command)[name] is (False if name == "report_only" else None)
    if name in BELOW_RANGE:
        with pytest.raises(typer.BadParameter):
            parse(commands, command, args[0], BELOW_RANGE[name])


@pytest.mark.parametrize("name", [name for name in GIVEN if name != "report_only"])
def test_a_shared_option_states_its_default_for_every_command(commands, name):
    """None when not given; the help says what that means: eval's and sweep's default, and in eapo study
    the study config's key of the same name."""
    for command in SHARED[name]:
        assert f"(eapo study: study.{name})." in param(commands, command, name).help


def test_eval_flags_say_what_sweep_and_study_eval_flags_say(commands):
    """eapo eval's --split, --limit, ... and sweep's and study's --eval-split, --eval-limit, ... are one
    declaration each: the same sentence and the same default outside eapo study."""
    for name in ("split", "limit", "temperature", "max_new_tokens", "batch_size"):
        plain, prefixed = param(commands, "eval", name), param(commands, "sweep", f"eval_{name}")
        assert plain.opts == [f"--{name.replace('_', '-')}"]
        assert prefixed.opts == [f"--eval-{name.replace('_', '-')}"]
        assert prefixed.help == plain.help.removesuffix(".") + f" (eapo study: study.eval_{name})."
        assert kind(plain) == kind(prefixed) and plain.default is prefixed.default is None


def test_output_dir_is_one_spelling_and_sweep_and_study_share_it(commands):
    found = {
        command: param(commands, command, "output_dir") for command in ("train", "eval", "sweep", "study")
    }
    assert {(tuple(p.opts), kind(p)) for p in found.values()} == {
        (("--output-dir", "-o"), kind(found["eval"]))
    }
    assert declaration(found["sweep"]) == declaration(found["study"]) and found["sweep"].required
    assert not found["train"].required and not found["eval"].required


def test_bad_seeds_are_one_usage_error_in_sweep_and_study(commands):
    for command in ("sweep", "study"):
        with pytest.raises(typer.BadParameter, match="'0,x' must be comma-separated integers"):
            parse(commands, command, "--seeds", "0,x")
    assert options.seed_list("0, 3,") == [0, 3] and options.seed_list(None) is None


EVAL_FLAGS = ["--k", "2", "--eval-split", "test", "--eval-limit", "3", "--eval-temperature", "0.5"]
EVAL_FLAGS += ["--eval-max-new-tokens", "16", "--eval-batch-size", "4", "--backend", "transformers"]


@pytest.fixture
def handed(monkeypatch, tmp_path):
    """``eapo sweep|study ARGS`` -> the keywords it hands run_sweep / run_study (nothing runs)."""
    import eapo.study
    import eapo.sweep

    seen = {}

    def capture(config, output_dir, **kwargs):
        seen.update(kwargs, config=config)
        raise eapo.sweep.SweepError("stop here")

    monkeypatch.setattr(eapo.sweep, "run_sweep", capture)
    monkeypatch.setattr(eapo.study, "run_study", capture)

    def invoke(command: str, *args: str) -> dict:
        seen.clear()
        result = CliRunner().invoke(app, [command, "--output-dir", str(tmp_path), *args])
        assert result.exit_code == 2 and "stop here" in result.output, result.output
        return dict(seen)

    return invoke


def test_sweep_and_study_evaluate_alike_with_the_same_flags(handed):
    """The same --k, --eval-*, --backend give every evaluation of a sweep and of a study the same settings
    (a study scores with the default scorers, which a sweep leaves unset); --seeds and --jobs alike."""
    from eapo.study import read_study_config

    sweep = handed("sweep", *EVAL_FLAGS, "--seeds", "0,3", "--jobs", "2")
    study = handed("study", "--config", "study_cpu", *EVAL_FLAGS, "--seeds", "0,3", "--jobs", "2")
    expected = EvalSettings(
        k=2, split="test", limit=3, temperature=0.5, max_new_tokens=16, batch_size=4, backend="transformers"
    )
    assert sweep["eval_options"] == expected
    assert study["settings"].eval_settings() == dataclasses.replace(expected, scorers=default_scorers())
    assert sweep["seeds"] == study["settings"].seeds == [0, 3]
    assert sweep["jobs"] == study["settings"].jobs == 2
    # unset: the built-in defaults (sweep), the study config's study section (study)
    assert handed("sweep")["eval_options"] == EvalSettings() and handed("sweep")["jobs"] == 1
    assert handed("sweep")["seeds"] is None
    assert handed("study", "--config", "study_cpu")["settings"] == read_study_config("study_cpu")[0]


def test_the_study_evaluates_at_study_eval_temperature(tmp_path):
    from eapo.study import StudySettings
    from eapo.sweep import SweepError

    assert StudySettings().eval_settings().temperature is None  # the run's, as in eapo sweep
    plan = {"methods": ["eapo"], "claims": "paper"}  # a study names what runs and its claims
    assert StudySettings(eval_temperature=0.0, **plan).validate().eval_settings().temperature == 0.0
    with pytest.raises(SweepError, match="study.eval_temperature must be >= 0 or null, got -1"):
        StudySettings(eval_temperature=-1, **plan).validate()


# --- the scorers' settings: flags generated from their registrations -------------------------------


@pytest.mark.parametrize("command", ["eval", "sweep", "study"])
def test_every_scorer_setting_is_a_flag_of_every_command_that_evaluates(commands, command):
    registered = scorer_settings()
    assert list(registered) == ["rouge_level", "reranker_backend"]
    for name, (_, setting) in registered.items():
        option = param(commands, command, name)
        assert option.opts == [setting.flag] and option.default is None
        assert option.help.startswith(setting.help + " Default: the run's reward.options.")
        assert option.metavar == "|".join(setting.choices)
        assert parse(commands, command, setting.flag, setting.choices[-1])[name] == setting.choices[-1]
        with pytest.raises(typer.BadParameter, match=f"{setting.flag} 'nope' is invalid; valid: "):
            parse(commands, command, setting.flag, "nope")
    assert param(commands, command, "rouge_level").help.endswith(
        "reward.options.rouge_l.level, else char (eapo study: study.scorer_settings.rouge_level)."
    )


def test_the_scorer_settings_reach_every_evaluation_alike(handed, monkeypatch, tmp_path):
    import eapo.evaluation as evaluation

    seen = {}

    def fake_run_eval(settings, **target):
        seen["eval"] = settings
        (tmp_path / "results.md").write_text("table\n", encoding="utf-8")
        return {}, tmp_path

    monkeypatch.setattr(evaluation, "run_eval", fake_run_eval)
    flags = ["--reranker-backend", "cross-encoder", "--rouge-level", "word"]
    assert CliRunner().invoke(app, ["eval", "--model", "tiny", *flags]).exit_code == 0
    sweep = handed("sweep", *flags)["eval_options"]
    study = handed("study", "--config", "study_cpu", *flags)["settings"]
    given = {"rouge_level": "word", "reranker_backend": "cross-encoder"}
    assert seen["eval"].scorer_settings == sweep.scorer_settings == study.scorer_settings == given
    assert study.eval_settings().scorer_settings == given
    assert sweep.cli_args()[-4:] == ["--rouge-level", "word", "--reranker-backend", "cross-encoder"]
    assert handed("sweep")["eval_options"].scorer_settings == {}  # the run's
    assert handed("study", "--config", "study_cpu")["settings"].scorer_settings == {}


def test_a_study_config_sets_the_scorer_settings_its_flags_override(tmp_path, handed):
    from eapo.study import read_study_config
    from eapo.sweep import SweepError

    config = tmp_path / "study.yaml"
    plan = "methods: [eapo], claims: paper"  # a study names what runs and its claims
    config.write_text(
        f"study: {{{plan}, scorer_settings: {{rouge_level: word, reranker_backend: bi-encoder}}}}\n"
    )
    assert read_study_config(config)[0].scorer_settings == {
        "rouge_level": "word",
        "reranker_backend": "bi-encoder",
    }
    settings = handed("study", "--config", str(config), "--rouge-level", "char")["settings"]
    assert settings.scorer_settings == {"rouge_level": "char", "reranker_backend": "bi-encoder"}
    config.write_text(f"study: {{{plan}, scorer_settings: {{rouge_level: words}}}}\n")
    with pytest.raises(SweepError, match="study.scorer_settings: --rouge-level 'words' is invalid"):
        read_study_config(config)


def test_the_shared_options_import_no_torch():
    code = (
        "import sys, typer\n"
        "import eapo.commands.options\n"
        "from eapo.cli import app\n"
        "typer.main.get_command(app)\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# --- eapo weights: options from core's declarations ----------------------------------------------


def test_weights_options_are_core_settings_with_their_help(commands):
    command = commands["weights"]
    generated = {p.name: p for p in command.get_params(command.make_context("weights", []))}
    assert set(WEIGHT_SETTINGS) <= set(generated)
    for name, setting in WEIGHT_SETTINGS.items():
        option = generated[name]
        assert f"--{name.replace('_', '-')}" in option.opts and f"--{name}" in option.opts
        assert option.help.startswith(f"{setting.help} Valid: {setting.allowed()}.")
        assert option.default is None
    for scheme in WEIGHTING_SCHEMES:  # every registered scheme is a --method choice
        assert command.make_context("weights", ["--method", scheme]).params["method"].value == scheme
    assert "Default: 0 (eapo); 0.2 (eapo_pi)." in generated["integral_gain"].help
    assert "Default: 0.2 (eapo, eapo_pi)." in generated["w0"].help


def test_weights_help_lists_every_setting_from_core():
    out = subprocess.run(
        [sys.executable, "-m", "eapo.cli", "weights", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "2000"},
    ).stdout
    for name, setting in WEIGHT_SETTINGS.items():
        assert f"--{name.replace('_', '-')}" in out and setting.help in out, name
        assert setting.citation in out, name
    assert "grpo|psr|nsr|w_reinforce|qae|eapo|eapo_pi" in out


def run_weights(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eapo.cli", "weights", "--entropies", "2.0,1.0,3.0,40.0", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )


def weights_column(out: str) -> list[float]:
    return [float(line.split()[2]) for line in out.splitlines() if line.strip()[:1].isdigit()]


def test_weights_take_both_spellings_and_every_setting_applies_as_in_training():
    clipped = run_weights("--w_min", "0.15", "--w-max", "0.25")
    assert clipped.returncode == 0, clipped.stderr
    assert weights_column(clipped.stdout) == [0.2, 0.15, 0.25, 0.25]
    fixed = run_weights("--method", "w_reinforce", "--w-pos", "0.05")
    assert fixed.returncode == 0, fixed.stderr
    assert weights_column(fixed.stdout) == [0.05, 0.05, 0.05, 0.05]
    pi = run_weights("--method", "eapo_pi", "--integral_gain", "0")
    assert weights_column(pi.stdout) == weights_column(run_weights().stdout) == [0.2, 0.1, 0.3, 2.0]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--w0", "-1"], "--w0=-1.0 is invalid; valid: a number >= 0"),
        (["--anchor-steps", "0"], "--anchor_steps=0 is invalid; valid: an integer >= 1"),
        (["--method", "grpo", "--w0", "0.3"], "w0 does not apply to method 'grpo'; it accepts w_pos, w_neg"),
        (["--w-min", "3"], "w_min=3.0 must be <= w_max=2.0 (default)"),
        (["--method", "nope"], "'nope' is not one of"),
    ],
)
def test_a_weight_out_of_range_or_not_taken_is_a_usage_error(args, message):
    out = run_weights(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr
