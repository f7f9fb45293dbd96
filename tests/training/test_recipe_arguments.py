"""Argument mistakes in the recipes and in ``miescore``: one line and exit status 2, with "did you mean" for a
typo; no prefix matching anywhere; a mistyped ``--dataset`` / ``--model_name_or_path`` never trains on invented
inputs; a missing extra names the extra (issue 33.1). Nothing here loads a model."""

from __future__ import annotations

import configparser
import json
import sys
from pathlib import Path

import pytest

from editor_rl_runs import RECIPE, recipe_cli
from modeling_miescore.cli.main import build_parser
from modeling_miescore.cli.main import main as miescore

ROOT = Path(__file__).resolve().parents[2]
TINY = str(RECIPE.parent / "configs" / "flow_grpo_editor_tiny_cpu.yaml")


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("args,message", [
    (["--learning-rat", "0.1"], "unknown option --learning-rat; did you mean --learning-rate?"),  # no prefix match
    (["--max_stepz", "3"], "unknown option --max_stepz; did you mean --max_steps?"),
    (["--report_to", "tensorbord"], "did you mean 'tensorboard'?"),
    (["--max_steps", "abc"], "argument --max_steps/--max-steps: invalid int value: 'abc'"),
    (["--reward", "spatialreword:CKPT"], "unknown reward kind 'spatialreword' in 'spatialreword:CKPT'; did you "
                                         "mean spatialreward? (spatialreward:CKPT)"),
])
def test_a_mistake_on_the_command_line_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert recipe_cli("--config", TINY, "--output_dir", "out", *args) == 2
    assert message in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing built, nothing written


def test_a_mistake_in_the_config_file_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo.yaml").write_text(Path(TINY).read_text().replace("learning_rate:", "learning_rat:"))
    assert recipe_cli("--config", "typo.yaml") == 2
    assert "typo.yaml: unknown key 'learning_rat'; did you mean learning_rate?" in _one_line(capsys.readouterr().err)
    assert recipe_cli("--config", "missing.yaml") == 2
    assert "--config missing.yaml does not exist" in _one_line(capsys.readouterr().err)
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    assert recipe_cli("--config", "list.yaml") == 2
    assert "must hold a YAML mapping" in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.yaml", "typo.yaml"]


@pytest.mark.parametrize("option,value,flag", [
    ("--dataset", "miescore-tiny/requets/rows.jsonl", "--build_tiny_requests true"),
    ("--model_name_or_path", "./miescore-tiny/flux2-kelin", "--build_tiny_editor flux2-klein"),
    ("--model_name_or_path", "someone/flux2-kelin", "--build_tiny_editor flux2-klein"),  # Hub-id shaped
])
def test_a_mistyped_input_path_is_never_built(tmp_path, monkeypatch, capsys, option, value, flag):
    """The tiny config builds its own inputs; a path typed on the command line is built only with the build flag
    on the command line too (today a typo wrote the tiny requests there and trained 30 steps)."""
    monkeypatch.chdir(tmp_path)
    assert recipe_cli("--config", TINY, option, value) == 2
    err = _one_line(capsys.readouterr().err)
    assert f"{option} '{value}' does not exist" in err and flag in err
    assert list(tmp_path.iterdir()) == []  # nothing at the typo, nor the tiny editor, nor a run folder


def test_without_any_build_flag_a_missing_typed_path_is_named(tmp_path, monkeypatch, capsys, toy_editor_path):
    monkeypatch.chdir(tmp_path)
    assert recipe_cli("--config", TINY, "--build_tiny_editor", "", "--build_tiny_requests", "false",
                      "--dataset", "nope.jsonl") == 2
    assert "--dataset 'nope.jsonl' does not exist; check the path" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_extra_names_it(tmp_path, monkeypatch, capsys, toy_editor_path, editing_requests):
    monkeypatch.setitem(sys.modules, "diffusers", None)  # `import diffusers` now raises ModuleNotFoundError
    out = tmp_path / "run"
    assert recipe_cli("--config", TINY, "--model_name_or_path", str(toy_editor_path), "--editor", "flux2-klein",
                      "--dataset", str(editing_requests), "--output_dir", str(out)) == 2
    assert "diffusers is not installed; install the rl extra: pip install 'miescore[rl]'" in _one_line(
        capsys.readouterr().err)
    assert not out.exists()
    assert miescore(["edit", "--pipeline", "flux2-klein", "--model", str(toy_editor_path), "--input",
                     str(editing_requests), "--out", str(tmp_path / "edits")]) == 2
    assert "pip install 'miescore[rl]'" in capsys.readouterr().err


def test_the_extras_table_agrees_with_setup_cfg():
    from modeling_miescore.utils.suggestions import EXTRAS

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = {}
    for name, value in config["options.extras_require"].items():
        members = [line.split(">")[0].split("=")[0].split("[")[0].strip() for line in value.splitlines()]
        members = [m for m in members if m and m != "miescore"]  # `all` only composes the others
        if members:
            declared[name] = tuple(members)
    assert {k: set(v) for k, v in EXTRAS.items()} == {k: set(v) for k, v in declared.items()}


def _parsers(parser, path=("miescore",)):
    """Every (sub)command parser under ``parser``, by its command path."""
    yield path, parser
    for action in parser._actions:
        if hasattr(action, "_name_parser_map"):  # a subparsers action
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_no_parser_matches_option_prefixes():
    seen = dict(_parsers(build_parser()))
    assert len(seen) > 20 and [p for p, parser in seen.items() if parser.allow_abbrev] == []
    sys.path.insert(0, str(RECIPE.parent))
    import flow_grpo_editor

    assert flow_grpo_editor.make_parser().allow_abbrev is False


def test_an_unknown_option_of_a_subcommand_shows_that_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_:
        miescore(["edit", "--input", "rows.jsonl", "--out", "x", "--num-image", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: miescore edit ") and "--num-images NUM_IMAGES" in err
    assert err.strip().endswith("error: unrecognized arguments: --num-image (1 value(s) not shown); did you mean --num-images?")
    with pytest.raises(SystemExit):
        miescore(["benchmark", "gedit", "--dataset", "d", "--edits", "e", "--out", "o", "--judg", "x"])
    err = capsys.readouterr().err
    assert err.startswith("usage: miescore benchmark gedit ") and "unrecognized arguments: --judg (1 value(s) not shown)" in err


def test_version(capsys):
    from modeling_miescore import __version__

    with pytest.raises(SystemExit) as exit_:
        miescore(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"miescore {__version__}"


def test_a_mistyped_reward_kind_is_suggested_and_a_module_path_is_still_a_callable():
    from modeling_miescore.rewards.specs import build_reward

    for spec, kind in (("spatialreword:CKPT", "spatialreward"), ("miescor:ckpt", "miescore"),
                       ("0.5*servve:http://127.0.0.1:1 + 0.5*miescore:x", "serve")):
        with pytest.raises(ValueError, match=f"did you mean {kind}\\?"):
            build_reward(spec)
    reward = build_reward("modeling_miescore.testing.editor_rewards:mean_redness")
    assert reward.name == "modeling_miescore.testing.editor_rewards:mean_redness"
    reward = build_reward("json:dumps")  # an importable top-level module is a callable, even if near a kind
    assert reward.fn is json.dumps


def test_the_other_recipes_share_the_parser(capsys):
    sys.path.insert(0, str(RECIPE.parent))
    import optimize_skill

    parser = optimize_skill.make_parser()
    assert parser.allow_abbrev is False
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args_and_config(["--output_dirr", "x"])
    assert exit_.value.code == 2
    assert "unknown option --output_dirr; did you mean --output_dir?" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("recipe,args,message", [
    ("train_miescore", ["--dataset", "d", "--model_name_or_path", "m", "--huber_delta", "-1"],
     "LossConfig: huber_delta must be a finite number > 0, got -1.0"),
    ("flow_grpo_editor", ["--editor_options", "{x"], "editor_options must be a JSON object, got '{x'"),
    ("train_miescore", ["--model_name_or_path", "m"], "--dataset is required"),  # was exit 1, from main()
    ("train_miescore", ["--dataset", "d"], "--model_name_or_path is required"),
    ("grpo_spatialreward", ["--oracle_model", "judge"], "set both oracle_base_url and oracle_model"),
])
def test_a_value_a_dataclass_refuses_is_one_line_and_exit_2(capsys, recipe, args, message):
    """A ``__post_init__`` that refuses a value gave a traceback from ``train_miescore.py``, and a missing input or
    a half-given judge stopped its recipe with exit status 1 after the parser had accepted them."""
    sys.path.insert(0, str(RECIPE.parent))
    parser = __import__(recipe).make_parser()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args_and_config(["--output_dir", "x", *args])
    assert exit_.value.code == 2
    assert f"error: {message}" in _one_line(capsys.readouterr().err)
