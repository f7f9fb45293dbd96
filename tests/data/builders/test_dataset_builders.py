"""The builder machinery shared by MIE-Bench and MER-Bench: the registry and the command line made from it,
the shared entry script, the card's features block, progress bars and the exit status of a build."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders import BUILDERS, get_builder
from modeling_miescore.data.builders.base import DatasetBuilder
from modeling_miescore.data.builders.output_folder import features_yaml
from modeling_miescore.data.builders.mer_bench import build_mer_bench, mer_bench_features
from modeling_miescore.data.builders.mie_bench import mie_bench_features
from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mer_raw(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("mer") / "raw"
    make_raw_mer_bench(raw, n_samples=4, seed=3, image_size=40)
    return raw


# ---------------------------------------------------------------------------------------------
# registry -> command line
# ---------------------------------------------------------------------------------------------


def test_registry_names_the_builders_and_rejects_unknown_names():
    assert list(BUILDERS) == ["mie-bench", "mer-bench"]
    titles = {name: get_builder(name).title for name in BUILDERS}
    assert titles == {"mie-bench": "MIE-Bench", "mer-bench": "MER-Bench"}
    assert all(issubclass(get_builder(name), DatasetBuilder) for name in BUILDERS)
    with pytest.raises(ValueError, match="unknown dataset 'imagenet'; choose one of: mie-bench, mer-bench"):
        get_builder("imagenet")


def test_build_dataset_subcommands_come_from_the_registry(capsys):
    with pytest.raises(SystemExit) as exc:
        miescore(["build-dataset", "--help"])
    assert exc.value.code == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in BUILDERS)
    with pytest.raises(SystemExit) as exc:
        miescore(["build-dataset", "imagenet", "--raw", "r", "--out", "o"])
    assert exc.value.code == 2 and "invalid choice: 'imagenet'" in capsys.readouterr().err
    # each builder adds the shared options and its own
    for name, own in (("mie-bench", "--mos-source"), ("mer-bench", "--groups-per-type")):
        with pytest.raises(SystemExit):
            miescore(["build-dataset", name, "--help"])
        text = capsys.readouterr().out
        assert all(opt in text for opt in ("--raw", "--out", "--overwrite", "--max-shard-bytes", "--push-to-hub", own))


def test_the_command_line_loads_no_data_libraries():
    """``miescore --help`` must work without the data extra: builders import datasets/pyarrow/pandas lazily."""
    code = ("import sys\n"
            "from modeling_miescore.cli import dataset\n"
            "from modeling_miescore.cli.main import CommandParser\n"
            "p = CommandParser(); dataset.register(p.add_subparsers())\n"
            "print(sorted(m for m in ('datasets', 'pyarrow', 'pandas') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ---------------------------------------------------------------------------------------------
# exit status and messages
# ---------------------------------------------------------------------------------------------


def test_exit_status_2_for_bad_data_and_bad_options(mer_raw, tmp_path, capsys):
    assert miescore(["build-dataset", "mer-bench", "--raw", str(tmp_path / "nowhere"), "--out",
                     str(tmp_path / "out")]) == 2
    assert "raw folder not found" in capsys.readouterr().err
    assert miescore(["build-dataset", "mer-bench", "--raw", str(mer_raw), "--out", str(tmp_path / "out"),
                     "--groups-per-type", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --groups-per-type must be >= 0" and not (tmp_path / "out").exists()
    assert miescore(["build-dataset", "mie-bench", "--raw", str(mer_raw), "--out", str(mer_raw)]) == 2
    assert "--out" in (err := capsys.readouterr().err) and "is --raw" in err


# ---------------------------------------------------------------------------------------------
# the shared entry script
# ---------------------------------------------------------------------------------------------


def test_dataset_script_builds_a_loadable_parquet_dataset(mer_raw, tmp_path):
    out = tmp_path / "mer"
    script = REPO / "dataset_scripts" / "build_dataset.py"
    run = subprocess.run([sys.executable, str(script), "mer-bench", "--raw", str(mer_raw), "--out", str(out),
                          "--groups-per-type", "2", "--no-progress"], capture_output=True, text=True, env=os.environ)
    assert run.returncode == 0, run.stderr
    assert "MER-Bench written to" in run.stdout
    import datasets

    ds = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
    assert set(ds) == {"2pair", "3pair", "4pair"} and all(ds[s].num_rows == 2 for s in ds)
    # a raw-data problem: exit 2 and the file:line
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in mer_raw.iterdir():
        (bad / f.name).symlink_to(f)
    (bad / "samples.jsonl").unlink()
    (bad / "samples.jsonl").write_text((mer_raw / "samples.jsonl").read_text() + "{not json\n")
    run = subprocess.run([sys.executable, str(script), "mer-bench", "--raw", str(bad), "--out", str(tmp_path / "o"),
                          "--no-progress"], capture_output=True, text=True, env=os.environ)
    assert run.returncode == 2 and "samples.jsonl:5: malformed JSON" in run.stderr and "Traceback" not in run.stderr


# ---------------------------------------------------------------------------------------------
# card metadata
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("features", [mie_bench_features, mer_bench_features], ids=["mie-bench", "mer-bench"])
def test_card_features_match_datasets_own_card_serialisation(features):
    """Our features block (from the public ``Features.to_dict()``) is what ``datasets`` itself writes into a card."""
    from datasets import DatasetInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    reference = DatasetCardData()
    DatasetInfosDict({"default": DatasetInfo(features=features())}).to_dataset_card_data(reference)
    assert features_yaml(features()) == reference.to_dict()["dataset_info"]["features"]


def test_card_features_refuse_unknown_kinds():
    from datasets import Features, Value
    from datasets.features import Array2D

    with pytest.raises(ValueError, match="no card form"):
        features_yaml(Features({"x": Value("int32"), "grid": Array2D(shape=(2, 2), dtype="float32")}))


def test_card_yaml_names_splits_files_and_sizes(mer_raw, tmp_path):
    summary = build_mer_bench(mer_raw, tmp_path / "out", progress=False, groups_per_type={2: 3, 3: 2, 4: 0})
    text = (tmp_path / "out" / "README.md").read_text()
    header = yaml.safe_load(text.split("---\n")[1])
    assert header["pretty_name"] == "MER-Bench (MultiEditReward-Bench)" and header["license"] == "unknown"
    [config] = header["configs"]
    assert config["data_files"] == [{"split": "2pair", "path": "data/2pair-*.parquet"},
                                    {"split": "3pair", "path": "data/3pair-*.parquet"}]  # no rows, no entry
    [info] = header["dataset_info"]
    assert {s["name"]: s["num_examples"] for s in info["splits"]} == {"2pair": 3, "3pair": 2}
    assert info["download_size"] == sum(v["file_bytes"] for v in summary.splits.values())
    assert text.rstrip().endswith("```") and "## Citation" in text and "long2026spatialreward" in text


# ---------------------------------------------------------------------------------------------
# progress bars
# ---------------------------------------------------------------------------------------------


def test_progress_bars_only_when_asked(mer_raw, tmp_path, capfd):
    build_mer_bench(mer_raw, tmp_path / "quiet", progress=False, groups_per_type=1)
    assert capfd.readouterr().err == ""
    build_mer_bench(mer_raw, tmp_path / "loud", progress=True, groups_per_type=1)
    err = capfd.readouterr().err
    assert "checking samples" in err and "checking candidates" in err and "writing MER-Bench" in err


def test_summary_to_dict_is_json(mer_raw, tmp_path):
    summary = build_mer_bench(mer_raw, tmp_path / "out", progress=False, groups_per_type=1)
    as_dict = json.loads(json.dumps(summary.to_dict()))
    assert as_dict["dataset"] == "mer-bench" and as_dict["num_groups"] == summary.num_groups == 3
    assert set(as_dict["splits"]) == {"2pair", "3pair", "4pair"} and as_dict["out_dir"] == str(tmp_path / "out")


def test_builders_parse_their_own_options():
    parser = argparse.ArgumentParser()
    get_builder("mer-bench").add_cli_arguments(parser)
    args = parser.parse_args(["--raw", "r", "--out", "o", "--seed", "4", "--annotators", "7", "--min-agreement", "4",
                              "--max-shard-bytes", "1.5MiB"])
    assert get_builder("mer-bench").builder_options(args) == {"seed": 4, "groups_per_type": 200, "n_annotators": 7,
                                                              "min_agreement": 4, "stratify_categories": True}
    plain = parser.parse_args(["--raw", "r", "--out", "o", "--no-stratify-categories"])
    assert get_builder("mer-bench").builder_options(plain)["stratify_categories"] is False
    assert args.max_shard_bytes == int(1.5 * 1024**2) and args.license == "unknown"
