"""The benchmark registry, iterated: every converter module registers one declared benchmark; every declaration
names a protocol that runs and report columns it fills; every published column is filled by one benchmark; and
every registered benchmark converts from its fixture (``raw_benchmarks.release_writer``) and, scored by a perfect
predictor through the report it declares, gets a perfect value in every column. A new benchmark is covered here
without editing this file."""

from __future__ import annotations

import importlib
import json

import pytest

from modeling_miescore.data.converters import CONVERTERS, get_converter
from modeling_miescore.data.converters.schema import REPORTS, BenchmarkSpec, check_declaration
from modeling_miescore.evaluation.benchmark_protocols import PROTOCOLS
from modeling_miescore.evaluation.converted_benchmarks import declared_benchmarks, report_columns
from modeling_miescore.evaluation.editor_benchmarks import EDITOR_BENCHMARKS
from modeling_miescore.evaluation.published_results import (
    SPATIALREWARD_TABLE3_COLUMNS,
    TABLE1_COLUMNS,
    TABLE6_COLUMNS,
    keyed_row,
)
from modeling_miescore.testing import raw_benchmarks as rb

PUBLISHED = {"zero-shot": TABLE6_COLUMNS, "reward": TABLE1_COLUMNS, "editors": SPATIALREWARD_TABLE3_COLUMNS}
MODULE_OF = {name: cls.__module__.rsplit(".", 1)[-1] for name, cls in CONVERTERS.items()}


def test_every_converter_module_registers_exactly_one_benchmark():
    assert len(set(MODULE_OF.values())) == len(MODULE_OF) >= 10  # the ten of the papers, one module each
    assert set(MODULE_OF.values()) <= set(CONVERTERS.modules())
    for name, module in MODULE_OF.items():
        loaded = importlib.import_module(f"modeling_miescore.data.converters.{module}")
        assert loaded.SPEC is get_converter(name).spec and loaded.SPEC.name == name


def test_a_second_converter_with_a_registered_name_is_refused():
    from modeling_miescore.data.converters import register_converter
    from modeling_miescore.data.converters.ieqa import IEQAConverter

    impostor = type("Impostor", (IEQAConverter,), {"__module__": "modeling_miescore.data.converters.ieqa"})
    with pytest.raises(ValueError, match="two converters register the benchmark name 'ieqa'"):
        register_converter(impostor)
    stray = type("Stray", (IEQAConverter,), {"__module__": "somewhere.else"})
    with pytest.raises(ValueError, match="not in a module of modeling_miescore.data.converters"):
        register_converter(stray)


@pytest.mark.parametrize("name", list(declared_benchmarks()))
def test_every_declaration_names_a_protocol_that_runs_and_columns_it_can_fill(name):
    declared = declared_benchmarks()[name]
    check_declaration(name, declared.protocol, declared.columns, declared.column_headers)
    editor = getattr(declared, "editor", None)
    if editor is not None:  # an editor benchmark: its judge protocol
        assert EDITOR_BENCHMARKS[editor.name] is editor and editor.dataset == name
        # its judge implements the prompt hook (the base class's raises): without --prompts, our own wording
        assert editor.judge_class().read_prompts(None, []).label.startswith("own (sha256 ")
        assert set(declared.columns["editors"].values()) <= set(editor.scores) | {"delta"}
    else:  # every other benchmark's protocol is declared in PROTOCOLS, MER-Bench's K-pair one included
        protocol = PROTOCOLS[declared.protocol]
        if protocol.unit == "edit":  # a converted benchmark: the config its protocol reads, and where it comes from
            assert protocol.config in declared.kinds, (name, protocol.config)
            assert declared.format_source.startswith("https://") and declared.tie_rule
        else:  # MER-Bench: groups, one predictions line per group
            assert (name, protocol.config) == ("mer-bench", "groups")
    assert declared.columns and set(declared.columns) <= set(REPORTS)


def test_every_published_column_is_filled_by_one_declared_benchmark():
    for report, published in PUBLISHED.items():
        filled = report_columns(report)
        assert set(published) <= set(filled), (report, sorted(set(published) - set(filled)))
        owners = [(n, key) for n, d in declared_benchmarks().items() for key in d.columns.get(report, {})]
        assert len(owners) == len({key for _, key in owners}), f"a {report} column is declared twice: {owners}"
    for key, (_, metric) in TABLE6_COLUMNS.items():  # the printed metric is what the protocol measures
        spec = declared_benchmarks()[report_columns("zero-shot")[key]["benchmark"]]
        assert (PROTOCOLS[spec.protocol].measure == "accuracy") == metric.startswith("Acc"), key


def test_a_published_row_with_a_value_too_few_is_an_error():
    with pytest.raises(ValueError, match=r"Table 6, X: 2 values for the 3 columns a, b, c"):
        keyed_row(("a", "b", "c"), (1.0, 2.0), "Table 6, X")


def test_a_malformed_declaration_is_refused_when_it_is_made():
    spec = get_converter("ieqa").spec
    fields = {f: getattr(spec, f) for f in BenchmarkSpec.__dataclass_fields__}
    for change, message in (({"protocol": ""}, "declares no protocol"),
                            ({"columns": {"table6": {"ieqa": "mean"}}}, "unknown report"),
                            ({"column_headers": {"other": "x"}}, "headers for columns it does not fill"),
                            ({"kinds": ("editing",)}, "declares its editor protocol"),
                            ({"dimensions": {"x": "beauty"}}, "unknown score keys"),
                            ({"default_split": "test"}, "a default file or a default split, not both"),
                            ({"default_file": ""}, "declare the release's main_file")):
        with pytest.raises(ValueError, match=message):
            BenchmarkSpec(**{**fields, **change})


@pytest.mark.parametrize("name", list(CONVERTERS))
def test_the_release_layout_a_spec_declares_makes_the_command_line(name):
    import argparse

    converter = get_converter(name)
    spec = converter.spec
    parser = converter.add_cli_arguments(argparse.ArgumentParser())
    options = {option: action for action in parser._actions for option in action.option_strings}
    assert options["--raw"].help == spec.release_folder
    assert ("--file" in options) == bool(spec.default_file) and ("--split" in options) == bool(spec.default_split)
    choice = spec.release_choice
    if choice is not None:  # the default is named in the help, and the constructor takes the option's dest
        assert options[f"--{choice[0]}"].help.endswith(f"(default: {choice[1]})")
        assert converter.builder_options(parser.parse_args(["--raw", "r", "--out", "o"]))[choice[0]] is None
    assert converter.main_file == (spec.default_file or spec.main_file)


def _perfect_predictions(data) -> dict[str, dict]:
    """Scores that agree with the humans on every row of the config the protocol reads: the human scores
    (pointwise), 1 / 0 for the preferred / other edit and equal scores for a tie (pairwise)."""
    from modeling_miescore.data.converters.schema import HUMAN_COLUMNS

    config = PROTOCOLS[data.protocol].config
    frame = data.frames[config]
    preds: dict[str, dict] = {}
    if config == "pointwise":
        for _, row in frame.iterrows():
            preds[row["id"]] = {k: float(row[c]) for k, c in HUMAN_COLUMNS.items() if row[c] == row[c]}
    else:
        for _, row in frame.iterrows():
            a, b = {"a": (1.0, 0.0), "b": (0.0, 1.0)}.get(row["label"], (0.5, 0.5))
            for edit, value in ((row["edited_a_id"], a), (row["edited_b_id"], b)):
                known = preds.setdefault(edit, {"value": value})["value"]
                assert known == value, f"fixture edit {edit} is preferred in one pair and not in another"
        keys = sorted(set(frame["dimension"]))  # every edit gets every judged key (attach_scores needs them all)
        preds = {edit: dict.fromkeys(keys, score["value"]) for edit, score in preds.items()}
    return preds


@pytest.mark.parametrize("name", list(CONVERTERS))
def test_every_benchmark_converts_from_its_fixture_and_scores_a_perfect_predictor_perfectly(name, tmp_path):
    from modeling_miescore.evaluation.converted_benchmarks import load_benchmark
    from modeling_miescore.evaluation.prediction_files import read_score_predictions
    from modeling_miescore.evaluation.paper_tables import evaluate_reward, evaluate_zero_shot

    spec = get_converter(name).spec
    rb.release_writer(MODULE_OF[name])(tmp_path / "raw")
    summary = get_converter(name)(tmp_path / "raw", tmp_path / "out", progress=False).build()
    assert set(summary.splits) == set(spec.kinds) and all(s["num_examples"] > 0 for s in summary.splits.values())
    if spec.editor is not None:
        from modeling_miescore.evaluation.editor_benchmarks.editing_rows import load_editing_rows

        rows = load_editing_rows(str(tmp_path / "out"), spec.editor)
        assert set(spec.subset_flags) <= set(rows.frame.columns) and len(rows.frame) > 0
        return
    data = load_benchmark(str(tmp_path / "out"))
    assert data.declaration is spec
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps({"id": i, **s}) + "\n" for i, s in _perfect_predictions(data).items()))
    values = {}
    if "zero-shot" in spec.columns:
        values.update(evaluate_zero_shot(data, read_score_predictions(path))["values"])
    if "reward" in spec.columns:
        values.update(evaluate_reward(data, path)["values"])
    perfect = {key: 100.0 if report == "zero-shot" and PROTOCOLS[spec.protocol].measure == "accuracy" else 1.0
               for report, columns in spec.columns.items() for key in columns}
    assert set(values) == set(perfect)
    measured = {key: v for key, v in values.items() if v is not None}  # None: a subset the fixture has no rows of
    assert measured and measured == pytest.approx({key: perfect[key] for key in measured})


def test_no_module_dispatches_on_a_protocol_name():
    """Code asks the declared protocol (``PROTOCOLS[name]``: its config, unit, run) what to do, never compares a
    benchmark's ``protocol`` with a name (MER-Bench's ``== "mer"`` branches, issue 35)."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "modeling_miescore"
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                    isinstance(side, ast.Attribute) and side.attr == "protocol" for side in (node.left, *node.comparators)
            ) and any(isinstance(side, ast.Constant) and isinstance(side.value, str)
                      for side in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert not found, found
