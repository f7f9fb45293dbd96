"""How ``miescore`` commands are declared: every command module is listed in ``COMMAND_MODULES`` (subcommands of
another command through ``PARENT_COMMAND``), command modules share only public helpers, and per-option checks live
in the options' argparse types."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_miescore.cli.main import build_parser, main

cli_main = importlib.import_module("modeling_miescore.cli.main")  # the package exports main() under that name

CLI_DIR = Path(cli_main.__file__).parent


@pytest.mark.parametrize("kind", ["mie-bench", "editing-models", "zero-shot", "reward"])
def test_batch_size_is_checked_by_its_argument_type(kind, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["benchmark", kind, "--dataset", str(tmp_path), "--model", "m", "--out", str(tmp_path / "out"),
              "--batch-size", "0"])
    assert exit_.value.code == 2
    assert f"miescore benchmark {kind}: error: argument --batch-size: must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (["spatialreward", "--model", "m", "--edited", "e.png", "--instruction", "x", "--timeout", "nan"],
     "argument --timeout: expected a finite number, got 'nan'"),
    (["spatialreward", "--model", "m", "--edited", "e.png", "--instruction", "x", "--timeout", "-1"],
     "argument --timeout: must be > 0, got -1.0"),
    (["judge", "--backend", "openai", "--model", "m", "--input", "i", "--output", "o", "--max-tokens", "0"],
     "argument --max-tokens: must be >= 1, got 0")])
def test_numbers_are_checked_by_their_argument_type(argv, message, capsys):
    """A timeout that is no positive number (nan, -1) is refused when the options are parsed, as every count is."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and f"error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("unknown", [["--api-key", "SECRET"], ["--api-key=SECRET"]])
def test_an_unknown_options_value_is_counted_never_echoed(unknown, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        main(["benchmark", "editors", "--runs", "a=b", "--out", str(tmp_path / "out"), *unknown])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("error: unrecognized arguments: --api-key (1 value(s) not shown)")
    assert "SECRET" not in err and not (tmp_path / "out").exists()


def test_subcommand_modules_register_under_their_parent_command(monkeypatch):
    assert "external_benchmarks" in cli_main.COMMAND_MODULES
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", {"benchmark": ("benchmark",),
                                                      "external_benchmarks": ("benchmark",)})
    args = build_parser().parse_args(["benchmark", "zero-shot", "--dataset", "d", "--predictions", "p", "--out", "o"])
    from modeling_miescore.cli.external_benchmarks import cmd_zero_shot

    assert args.func is cmd_zero_shot and args.batch_size == 8
    monkeypatch.setattr(cli_main, "COMMAND_MODULES", {"external_benchmarks": ("benchmark",),
                                                      "benchmark": ("benchmark",)})
    with pytest.raises(RuntimeError, match="adds subcommands to 'benchmark', which is not listed before it"):
        build_parser()


def test_command_modules_import_no_private_names_from_each_other():
    private = []
    for path in sorted(CLI_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:  # from .main import ...
                private += [f"{path.name}: from .{node.module} import {alias.name}" for alias in node.names
                            if alias.name.startswith("_")]
    assert private == []
    listed = set(cli_main.COMMAND_MODULES)
    helpers = {"__init__", "__main__", "main", "model_calls", "editors_demo"}  # the parser, shared options, steps
    assert {p.stem for p in CLI_DIR.glob("*.py")} - helpers == listed


def test_each_module_adds_the_commands_the_table_names():
    for name, commands in cli_main.COMMAND_MODULES.items():
        parser = cli_main.CommandParser(prog="miescore")
        sub = parser.add_subparsers(dest="command")
        module = importlib.import_module(f"modeling_miescore.cli.{name}")
        if getattr(module, "PARENT_COMMAND", None):
            assert commands == (module.PARENT_COMMAND,), name
            continue
        module.register(sub)
        assert tuple(sub.choices) == commands, name
        assert [a.help for a in sub._choices_actions] == [cli_main.COMMAND_HELP[c] for c in commands], name


def test_a_command_imports_only_its_own_module():
    code = ("import sys; from modeling_miescore.cli.main import build_parser; build_parser(sys.argv[1:]); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('modeling_miescore.cli.')))")
    loaded = {}
    for argv in (["doctor", "x"], ["benchmark", "gedit"], ["--help"], ["scor"]):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
        loaded[argv[0]] = set(ast.literal_eval(out.stdout.strip())) & set(cli_main.COMMAND_MODULES)
    assert loaded["doctor"] == {"doctor"}
    assert loaded["benchmark"] == {"benchmark", "external_benchmarks", "editor_benchmarks"}
    assert loaded["--help"] == loaded["scor"] == set()


def test_the_server_options_are_built_only_when_serve_is_parsed(monkeypatch, capsys):
    from modeling_miescore.cli import serve

    built = []
    monkeypatch.setattr(serve, "_add_settings_options", lambda parser: built.append(parser.prog))
    parser = build_parser()
    parser.parse_args(["benchmark", "zero-shot", "--dataset", "d", "--predictions", "p", "--out", "o"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    assert built == []
    parser.parse_args(["serve", "--model", "m"])
    parser.parse_args(["serve", "--model", "m"])
    assert built == ["miescore serve"]


@pytest.mark.slow  # a fresh interpreter: 2-5 s on a loaded 2-core machine
def test_only_serve_imports_its_settings_declaration():
    """The server's options are built from a pydantic model when ``serve`` is parsed; the other commands and
    ``miescore --help`` do not pay for importing pydantic (about 0.4 s)."""
    code = ("import sys; from modeling_miescore.cli.main import build_parser; parser = build_parser(); "
            "parser.parse_args(['benchmark', 'zero-shot', '--dataset', 'd', '--predictions', 'p', '--out', 'o']); "
            "print('pydantic' in sys.modules); parser.parse_args(['serve', '--model', 'm', '--max-batch', '3']); "
            "print('pydantic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr


def test_help_builds_the_command_table_without_importing_a_registry(capsys):
    """``miescore --help`` imports no converter, dataset builder or editor-benchmark module (issue 35): the
    subcommands that come from a registry are added when their command is parsed; there they all are."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "modeling_miescore.cli", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "convert-benchmark" in done.stdout and "build-dataset" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    registries = ("modeling_miescore.data.converters.", "modeling_miescore.data.builders.",
                  "modeling_miescore.evaluation.editor_benchmarks")
    assert "modeling_miescore.cli.main" in imported
    assert not sorted(m for m in imported if m.startswith(registries))
    from modeling_miescore.cli.main import build_parser
    from modeling_miescore.data.converters import CONVERTERS

    for argv, names in ((["convert-benchmark", "--help"], list(CONVERTERS)), (["build-dataset", "--help"],
                                                                             ["mie-bench", "mer-bench"]),
                        (["benchmark", "--help"], ["gedit", "imgedit", "editors", "zero-shot", "mie-bench"])):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
        out = capsys.readouterr().out
        assert all(name in out for name in names), (argv, out)
