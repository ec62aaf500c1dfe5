"""Every setting's bad values, generated from the config's own fields: each is refused before anything
is written, as one ``error:`` line that names the file, the key, the value and what is allowed.

The fields come from ``dataclasses.fields`` (``eapo.config.setting_fields``), not from a list kept by
hand: a new setting that declares no ``valid=`` fails here, and so does one whose declaration lets a
value through that no setting may hold (NaN, infinity, text in a number, an unknown choice).
"""

from __future__ import annotations

import math
import types
import typing
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from eapo.cli import app
from eapo.config import (
    ANY_OF_TYPE,
    LR_SCHEDULERS,
    ConfigError,
    allowed,
    load_config,
    read_config_tree,
    setting_fields,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
SETTINGS = setting_fields()
UNKNOWN_CHOICE = "no-such-choice"
NAN, INF = float("nan"), float("inf")


def _arms(tp) -> list:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [arg for arg in typing.get_args(tp) if arg is not type(None)]
    return [tp]


def bad_candidates(tp) -> list:
    """The suspicious values a setting of type ``tp`` can be given: negative, zero, NaN, infinities, a
    string, a fraction for an integer, an empty or unknown string, the wrong container, bad entries."""
    out: list = []
    for arm in _arms(tp):
        origin = typing.get_origin(arm)
        if origin is not dict:
            out.append({"a": 1})  # a mapping where a value goes
        if arm is bool:
            out += ["abc", 2]
        elif arm is int:
            out += [-1, 0, 2.5, NAN, INF, "abc"]
        elif arm is float:
            out += [-1.0, 0.0, NAN, INF, -INF, "abc"]
        elif arm is str:
            out += ["", UNKNOWN_CHOICE]
        elif origin is list:
            (item,) = typing.get_args(arm)
            out += ["abc", [], [-1] if item is int else [""]]
        elif origin is dict:
            _, item = typing.get_args(arm)
            out += ["abc", [1]]
            if item is float:
                out += [{"rouge_l": -1.0}, {"rouge_l": NAN}, {UNKNOWN_CHOICE: 1.0}, {"rouge_l": 0.0}]
            elif typing.get_origin(item) is dict:
                out += [{UNKNOWN_CHOICE: {}}, {"rouge_l": "abc"}]
        else:
            raise AssertionError(f"no bad values known for type {arm!r}: extend bad_candidates")
    unique = {}
    for value in out:
        unique.setdefault(repr(value), value)
    return list(unique.values())


def must_be_refused(tp, valid, value) -> bool:
    """Values no setting may hold, whatever its declaration (the test's own rules, not the config's)."""
    arms = _arms(tp)
    numeric = [arm for arm in arms if arm in (int, float)]
    if isinstance(value, float) and not math.isfinite(value):
        return True  # NaN or infinity, in a number or anywhere else
    if isinstance(value, str) and str not in arms:
        return True  # text where a number, a switch, a list or a mapping goes
    if isinstance(value, dict) and not any(typing.get_origin(arm) is dict for arm in arms):
        return True
    if isinstance(value, float) and not value.is_integer() and numeric == [int]:
        return True
    if value == "" and valid is not ANY_OF_TYPE:
        return True
    if value == UNKNOWN_CHOICE and valid.choices is not None:
        return True
    return bool(arms == [bool] and not isinstance(value, bool))


def expected_refusal(tp, valid, value) -> bool:
    """Refused by the test's rules, or by what the setting declares it admits (negative, zero, ...)."""
    if must_be_refused(tp, valid, value):
        return True
    number = (
        float(value)
        if isinstance(value, int) and not isinstance(value, bool) and float in _arms(tp)
        else value
    )
    return not valid.admits(number)


def as_override(value) -> str:
    if isinstance(value, float) and math.isnan(value):
        return ".nan"
    if isinstance(value, float) and math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    if value == "":
        return "''"
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def value_forms(value) -> list[str]:
    """How the message may show the value: repr, or repr of the float an int became."""
    if isinstance(value, dict):  # shown merged into the file's mapping
        return [", ".join(f"{k!r}: {v!r}" for k, v in value.items()) or "{}"]
    forms = [repr(value)]
    if isinstance(value, int) and not isinstance(value, bool):
        forms.append(repr(float(value)))
    return forms


def with_value(tree: dict, key: str, value) -> dict:
    tree = yaml.safe_load(yaml.safe_dump(tree))
    node = tree
    *sections, name = key.split(".")
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = value
    return tree


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.mark.parametrize("key", [key for key, _, _ in SETTINGS])
def test_every_bad_value_of_every_setting_is_a_clean_error(key, tmp_path, runner):
    spec, tp = next((spec, tp) for k, spec, tp in SETTINGS if k == key)
    valid = spec.metadata.get("valid")
    assert valid is not None, (
        f"{key} declares no constraint: add valid=... next to its help string (at_least, above, between, "
        "one_of, NON_EMPTY, satisfies, or ANY_OF_TYPE when every value of its type is valid)"
    )
    tree = read_config_tree(TINY)
    refused = 0
    in_file = tree
    for part in key.split("."):
        in_file = in_file.get(part) if isinstance(in_file, dict) else None
    for value in bad_candidates(tp):
        override = f"{key}={as_override(value)}"
        # an override's mapping is merged into the file's (reward.weights.rouge_l=0 keeps format's weight)
        merged = {**in_file, **value} if isinstance(value, dict) and isinstance(in_file, dict) else value
        # the same value from a YAML file and from an override
        written = tmp_path / "bad.yaml"
        written.write_text(yaml.safe_dump(with_value(tree, key, value)))
        for path, overrides in ((written, []), (TINY, [override])):
            expect_error = expected_refusal(tp, valid, merged if overrides else value)
            try:
                load_config(path, overrides)
            except ConfigError as error:
                message = str(error)
                if not expect_error:
                    continue  # admitted alone, refused with the rest of tiny.yaml (a relation): clean too
                assert "\n" not in message, message
                assert message.startswith(f"{path}: "), message
                assert f"{key}" in message and any(form in message for form in value_forms(value)), message
                assert f"valid: {allowed(spec, tp)}" in message, message
                if overrides:
                    assert f"(set by the override {override!r})" in message, message
            else:
                assert not expect_error, f"{key}={value!r} was accepted from {path.name}"
        if not expected_refusal(tp, valid, merged):
            continue
        refused += 1
        # the command line: exit status 2, one error line, no traceback, nothing written
        output_dir = tmp_path / "run"
        result = runner.invoke(
            app, ["train", "--config", str(TINY), "--output-dir", str(output_dir), override]
        )
        assert result.exit_code == 2, (override, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and key in lines[0], result.output
        assert "Traceback" not in result.output
        assert not output_dir.exists()
    assert refused, f"no bad value of {key} was refused"


def test_the_generated_cases_cover_every_setting():
    """The count of settings and of (setting, bad value) cases the test above tries (reported)."""
    cases = sum(len(bad_candidates(tp)) for _, _, tp in SETTINGS)
    refused = sum(
        expected_refusal(tp, spec.metadata["valid"], value)
        for _, spec, tp in SETTINGS
        for value in bad_candidates(tp)
    )
    assert len(SETTINGS) >= 80 and len({key for key, _, _ in SETTINGS}) == len(SETTINGS)
    assert cases > 4 * len(SETTINGS)
    assert refused > 3 * len(SETTINGS)


def test_the_four_reported_tracebacks_are_clean_errors(tmp_path, runner):
    for override, says in [
        ("algorithm.w0=-1", "algorithm.w0=-1.0 is invalid; valid: a number >= 0, or null"),
        ("algorithm.w_max=-3", "algorithm.w_max=-3.0 is invalid; valid: a number >= 0, or null"),
        ("train.prompts_per_step=0", "train.prompts_per_step=0 is invalid; valid: an integer >= 1"),
        ("rollout.temperature=0", "rollout.temperature=0.0 is invalid; valid: a number > 0"),
    ]:
        output_dir = tmp_path / "run"
        result = runner.invoke(
            app, ["train", "--config", str(TINY), "--output-dir", str(output_dir), override]
        )
        assert result.exit_code == 2 and not output_dir.exists()
        assert result.output.startswith(f"error: {TINY}: {says}"), result.output
        assert f"(set by the override '{override}')" in result.output


def test_w_min_above_w_max_names_both_and_the_default():
    with pytest.raises(ConfigError, match=r"algorithm.w_min=3.0 must be <= algorithm.w_max=2.0 \(default\)"):
        load_config(TINY, ["algorithm.w_min=3"])
    with pytest.raises(ConfigError, match=r"algorithm.w_min=1.5 must be <= algorithm.w_max=1.0 "):
        load_config(TINY, ["algorithm.w_min=1.5", "algorithm.w_max=1"])
    assert load_config(TINY, ["algorithm.w_min=1", "algorithm.w_max=1"]).algorithm.w_max == 1.0


@pytest.mark.parametrize(
    ("written", "number"),
    [
        ("1e-5", 1e-5),
        ("3E-4", 3e-4),
        (".5", 0.5),
        ("-.5", -0.5),
        ("1.0e5", 1e5),
        ("2e+3", 2e3),
        ("1_000.5", 1000.5),
    ],
)
def test_numbers_are_read_as_a_user_writes_them(written, number, tmp_path):
    from eapo.config import parse_overrides

    assert parse_overrides([f"train.learning_rate={written}"]) == {"train": {"learning_rate": number}}
    path = tmp_path / "lr.yaml"
    path.write_text(f"train:\n  learning_rate: {written}\n")
    assert read_config_tree(path) == {"train": {"learning_rate": number}}
    if number > 0:
        assert load_config(TINY, [f"train.learning_rate={written}"]).train.learning_rate == number
        assert load_config(path).train.learning_rate == number
    # what is not a number stays text: versions, names, dates' kin
    assert parse_overrides(["data.split=1.2.3", "model.name_or_path=e5", "data.prompt=1e"]) == {
        "data": {"split": "1.2.3", "prompt": "1e"},
        "model": {"name_or_path": "e5"},
    }


def test_lr_schedulers_are_transformers_own():
    from transformers import SchedulerType

    assert set(LR_SCHEDULERS) == {s.value for s in SchedulerType}


def test_loss_types_are_trls_own():
    from trl import GRPOConfig

    from eapo.config import LOSS_TYPES

    help_text = GRPOConfig.__dataclass_fields__["loss_type"].metadata["help"]
    assert all(f"'{name}'" in help_text for name in LOSS_TYPES)


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "--config", str(TINY)],
        ["sweep", "--config", str(TINY), "--methods", "eapo"],
        ["study", "--config", "STUDY"],
    ],
    ids=["eval", "sweep", "study"],
)
def test_eval_sweep_and_study_report_a_bad_setting_as_one_line_and_exit_2(command, tmp_path, runner):
    """The study's config is a training config with a ``study:`` section naming what runs and its claims
    (the tiny config with one); its bad training setting is reported the same way."""
    if command[-1] == "STUDY":
        study = tmp_path / "tiny_study.yaml"
        study.write_text(TINY.read_text() + "\nstudy:\n  methods: [eapo]\n  claims: paper\n")
        command = [*command[:-1], str(study)]
    where = command[2]
    output_dir = tmp_path / "out"
    result = runner.invoke(app, [*command, "--output-dir", str(output_dir), "train.learning_rate=-1e-5"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error: ") and f"{where}: train.learning_rate=-1e-05 is invalid" in lines[0]
    assert "valid: a number > 0 (set by the override 'train.learning_rate=-1e-5')" in lines[0]
    assert not output_dir.exists()
