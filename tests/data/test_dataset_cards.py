"""The generated dataset cards as a Hugging Face user meets them: every Python block runs against the built
dataset and names only splits it has, the license is explicit and agrees with the text, and the task categories
are Hub task ids that fit rating and preference data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from card_blocks import python_blocks, run_python_blocks
from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders import mer_bench_card, mie_bench_card
from modeling_miescore.data.builders.mer_bench import build_mer_bench
from modeling_miescore.data.builders.mie_bench import build_mie_bench
from modeling_miescore.data.schema import TASKS
from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench
from tiny_mie_raw import instance_ids, tiny_mie_raw

SIZES = dict(zip(TASKS[:4], [5, 5, 4, 6]))


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, tuple[Path, str, list[str]]]:
    """name -> (built folder, the card's placeholder repo id, the splits built)."""
    base = tmp_path_factory.mktemp("cards")
    raw = tiny_mie_raw(base / "mie-raw", SIZES)
    full = build_mie_bench(raw, base / "mie-full", progress=False)
    two_splits = base / "train-validation.csv"
    two_splits.write_text("instance_id,split\n" + "".join(
        f"{iid},{'validation' if k % 4 == 0 else 'train'}\n" for k, iid in enumerate(instance_ids(SIZES))))
    no_test = build_mie_bench(raw, base / "mie-no-test", progress=False, split_file=two_splits)
    make_raw_mer_bench(base / "mer-raw", n_samples=4, seed=3, image_size=40)
    no_3pair = build_mer_bench(base / "mer-raw", base / "mer-no-3pair", progress=False,
                               groups_per_type={2: 2, 3: 0, 4: 1})
    return {
        "mie-bench": (base / "mie-full", mie_bench_card.CARD.repo_placeholder, list(full.splits)),
        "mie-bench without test": (base / "mie-no-test", mie_bench_card.CARD.repo_placeholder,
                                   list(no_test.splits)),
        "mer-bench without 3pair": (base / "mer-no-3pair", mer_bench_card.CARD.repo_placeholder,
                                    list(no_3pair.splits)),
    }


def card_header(folder: Path) -> dict:
    return yaml.safe_load((folder / "README.md").read_text().split("---\n")[1])


def card_section(folder: Path, title: str) -> str:
    text = (folder / "README.md").read_text()
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0].strip()


def test_the_builds_have_the_splits_the_cards_must_cope_with(builds):
    assert builds["mie-bench"][2] == ["train", "validation", "test"]
    assert builds["mie-bench without test"][2] == ["train", "validation"]
    assert builds["mer-bench without 3pair"][2] == ["2pair", "4pair"]


@pytest.mark.parametrize("name", ["mie-bench", "mie-bench without test", "mer-bench without 3pair"])
def test_the_usage_snippet_names_only_splits_of_this_build(builds, name):
    folder, placeholder, splits = builds[name]
    blocks = python_blocks((folder / "README.md").read_text())
    assert blocks and placeholder in "\n".join(blocks)
    named = {a or b for a, b in re.findall(r'ds\["([^"]+)"\]|split="([^"]+)"', "\n".join(blocks))}
    assert named and named <= set(splits), (named, splits)
    assert ", ".join(splits) in blocks[0]  # the comment lists this build's splits


def test_every_python_block_of_every_dataset_card_runs_against_its_build(builds, tmp_path):
    cards = {name: ((folder / "README.md").read_text(), {placeholder: str(folder)})
             for name, (folder, placeholder, _) in builds.items()}
    result = run_python_blocks(cards, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[0] == str(sum(len(python_blocks(markdown)) for markdown, _ in cards.values()))


def test_the_usage_snippet_names_the_repo_it_is_pushed_to(tmp_path, monkeypatch):
    from modeling_miescore.data.builders import base

    pushed = []
    monkeypatch.setattr(base, "check_hub_push", lambda repo_id, token=None: None)
    monkeypatch.setattr(base, "push_folder_to_hub", lambda folder, repo_id, **kw: pushed.append(repo_id) or "url")
    raw = tiny_mie_raw(tmp_path / "raw", {TASKS[0]: 5})
    build_mie_bench(raw, tmp_path / "out", progress=False, push_to_hub="someone/mie-bench")
    blocks = "\n".join(python_blocks((tmp_path / "out" / "README.md").read_text()))
    assert pushed == ["someone/mie-bench"] and 'load_dataset("someone/mie-bench")' in blocks
    assert mie_bench_card.CARD.repo_placeholder not in blocks


def test_mie_bench_license_default_follows_the_paper_and_the_card_agrees(builds, tmp_path):
    folder = builds["mie-bench"][0]
    assert card_header(folder)["license"] == "cc-by-nc-4.0"
    section = card_section(folder, "License")
    assert section.startswith("`cc-by-nc-4.0` (the builder's default).")
    assert "CC BY 4.0" in section and "non-commercial research only" in section and "CC BY-NC 4.0" in section
    raw = tiny_mie_raw(tmp_path / "raw", {TASKS[0]: 5})
    build_mie_bench(raw, tmp_path / "out", progress=False, license="cc-by-4.0")
    assert card_header(tmp_path / "out")["license"] == "cc-by-4.0"
    assert card_section(tmp_path / "out", "License").startswith(
        "`cc-by-4.0` (set by whoever built this dataset, with `--license`).")


def test_mer_bench_license_is_explicit_about_what_is_known(builds):
    folder = builds["mer-bench without 3pair"][0]
    assert card_header(folder)["license"] == "unknown"
    section = card_section(folder, "License")
    assert section.startswith("`unknown` (the builder's default).")
    assert "states no license" in section and "`--license`" in section


def test_license_options_say_their_default_and_why(capsys):
    for name, words in (("mie-bench", "non-commercial research only"), ("mer-bench", "states none")):
        with pytest.raises(SystemExit):
            miescore(["build-dataset", name, "--help"])
        assert words in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("name", ["mie-bench", "mer-bench without 3pair"])
def test_task_categories_are_hub_task_ids_that_fit_rating_data(builds, name):
    header = card_header(builds[name][0])
    # ids of the Hub's task list (huggingface.js, packages/tasks/src/pipelines.ts); no question answering here
    assert header["task_categories"] == ["image-to-image", "image-text-to-text"]
    assert {"image-editing", "human-ratings"} <= set(header["tags"])
