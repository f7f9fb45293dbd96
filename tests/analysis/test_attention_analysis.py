"""The attention analysis of the SpatialReward paper (sec. 5.4 Table 5, appendix C.1): metrics, extraction, CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from modeling_miescore.analysis.attention_maps import (
    decoder_attention_layers,
    extract_attention_maps,
    reasoning_char_span,
    reasoning_token_mask,
    resize_to_grid,
    sc_prompt_inputs,
)
from modeling_miescore.analysis.attention_maps import (
    concentration_index,
    entropy,
    entropy_gap,
    inter_sample_stability,
    pairwise_correlations,
    source_map,
    stability_per_sample,
)

UNIFORM = np.full((24, 24), 1 / 576)


def _one_hot(row=3, col=7, shape=(24, 24)):
    m = np.zeros(shape)
    m[row, col] = 1.0
    return m


# ---------------------------------------------------------------------------------------------------------------
# Metrics on hand-made maps (C.1 definitions)
# ---------------------------------------------------------------------------------------------------------------


def test_entropy_uniform_one_hot_and_two_cells():
    assert entropy(UNIFORM) == pytest.approx(math.log(576), abs=1e-12)
    assert entropy(_one_hot()) == 0.0
    two = np.zeros((24, 24))
    two[0, 0] = two[5, 5] = 3.0  # unnormalised: normalised first
    assert entropy(two) == pytest.approx(math.log(2), abs=1e-12)
    assert entropy(np.full((24, 24), 7.0)) == pytest.approx(math.log(576), abs=1e-12)


def test_entropy_gap_is_absolute_difference():
    assert entropy_gap(UNIFORM, _one_hot()) == pytest.approx(math.log(576), abs=1e-12)
    assert entropy_gap(_one_hot(), UNIFORM) == pytest.approx(math.log(576), abs=1e-12)
    assert entropy_gap(UNIFORM, UNIFORM) == 0.0


def test_concentration_index_known_values():
    assert concentration_index(_one_hot()) == pytest.approx(1.0)
    assert concentration_index(UNIFORM) == pytest.approx(58 / 576)  # top ceil(57.6) = 58 cells
    peaked = np.full(576, 0.42 / 518)
    peaked[::10][:58] = 0.01  # 58 cells hold 0.58
    assert concentration_index(peaked.reshape(24, 24)) == pytest.approx(0.58)
    small = np.array([[0.4, 0.1], [0.2, 0.3]])
    assert concentration_index(small, top_fraction=0.5) == pytest.approx(0.7)
    assert concentration_index(small, top_fraction=0.25) == pytest.approx(0.4)


def test_source_map_is_mean_of_normalised_sources():
    a, b = _one_hot(0, 0), 10 * _one_hot(1, 1)  # b's scale must not matter
    combined = source_map([a, b])
    assert combined.sum() == pytest.approx(1.0)
    assert combined[0, 0] == pytest.approx(0.5) and combined[1, 1] == pytest.approx(0.5)
    assert entropy(combined) == pytest.approx(math.log(2))
    np.testing.assert_allclose(source_map([3 * UNIFORM]), UNIFORM)


def test_stability_known_correlations():
    rng = np.random.default_rng(0)
    x = rng.random((24, 24))
    same, opposite = 2 * x + 1, 5 - x
    corr = pairwise_correlations([x, same, opposite])
    assert corr[0, 1] == pytest.approx(1.0) and corr[0, 2] == pytest.approx(-1.0)
    assert corr[1, 2] == pytest.approx(-1.0) and np.isnan(np.diag(corr)).all()
    assert inter_sample_stability([x, same, opposite]) == pytest.approx(-1 / 3)
    # uncorrelated by construction: centred patterns orthogonal to each other
    u = np.array([[1.0, -1.0], [1.0, -1.0]])
    v = np.array([[1.0, 1.0], [-1.0, -1.0]])
    assert inter_sample_stability([u + 2, v + 2]) == pytest.approx(0.0, abs=1e-12)
    # against numpy's own Pearson correlation on random maps
    maps = [rng.random((24, 24)) for _ in range(5)]
    reference = np.corrcoef(np.stack([m.ravel() for m in maps]))
    expected = reference[np.triu_indices(5, k=1)].mean()
    assert inter_sample_stability(maps) == pytest.approx(expected, abs=1e-12)
    per_sample = stability_per_sample(maps)
    assert per_sample.mean() == pytest.approx(expected, abs=1e-12)
    assert per_sample[0] == pytest.approx((reference[0].sum() - 1) / 4, abs=1e-12)


def test_stability_leaves_out_constant_maps():
    rng = np.random.default_rng(1)
    x = rng.random((24, 24))
    corr = pairwise_correlations([x, 3 * x, UNIFORM])
    assert np.isnan(corr[2]).all() and np.isnan(corr[:, 2]).all()
    assert inter_sample_stability([x, 3 * x, UNIFORM]) == pytest.approx(1.0)
    assert math.isnan(inter_sample_stability([x]))


@pytest.mark.parametrize("bad, needle", [(-UNIFORM, "non-negative"), (np.zeros((24, 24)), "positive mass"),
                                         (np.ones(576), "2-D"), (np.full((2, 2), np.nan), "finite")])
def test_metrics_reject_bad_maps(bad, needle):
    with pytest.raises(ValueError, match=needle):
        entropy(bad)


# ---------------------------------------------------------------------------------------------------------------
# Resizing to the 24 x 24 grid and locating the reasoning tokens
# ---------------------------------------------------------------------------------------------------------------


def test_resize_to_grid_keeps_region_mass():
    up = resize_to_grid(np.array([[1.0, 0.0], [0.0, 0.0]]), 24, "area")
    assert up.shape == (24, 24) and up.sum() == pytest.approx(1.0)
    assert up[:12, :12].sum() == pytest.approx(1.0) and entropy(up) == pytest.approx(math.log(144))
    tokens = np.zeros((32, 40))
    tokens[:16, :20] = 1.0  # the top-left quarter of the image
    down = resize_to_grid(tokens, 24, "area")
    assert down[:12, :12].sum() == pytest.approx(1.0)
    smooth = resize_to_grid(tokens, 24, "bilinear")
    assert smooth.sum() == pytest.approx(1.0) and 0.9 < smooth[:12, :12].sum() < 1.0
    np.testing.assert_allclose(resize_to_grid(np.ones((7, 9)), 24, "bilinear"), UNIFORM, atol=1e-12)
    with pytest.raises(ValueError, match="resize mode"):
        resize_to_grid(tokens, 24, "nearest")


def test_reasoning_char_span():
    text = '{"edit_region": [], "reasoning" : "a \\"quoted\\" word", "score": [1, 2]}'
    start, end = reasoning_char_span(text)
    assert text[start:end] == 'a \\"quoted\\" word'
    cut = '{"reasoning": "the generation stopped here'
    start, end = reasoning_char_span(cut)
    assert cut[start:end] == "the generation stopped here"
    assert reasoning_char_span('{"score": [1, 2]}') is None


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from modeling_miescore.testing import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward", max_new_tokens=6)


@pytest.fixture(scope="module")
def tiny(tiny_path):
    from modeling_miescore.scoring.loading import load_spatialreward

    return load_spatialreward(str(tiny_path), device="cpu", dtype="float32")


ANSWER = '{"reasoning": "The cat is placed.", "score": [18, 21]}'
CONTENT = "The cat is placed."


def _expected_reasoning_tokens(tokenizer, text):
    """Indices of the tokens overlapping the reasoning content, from the tokenizer's own offsets."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    lo = text.index(CONTENT)
    hi = lo + len(CONTENT)
    return encoded["input_ids"], [k for k, (s, e) in enumerate(encoded["offset_mapping"]) if s < hi and e > lo]


def test_reasoning_token_mask_matches_tokenizer_offsets(tiny):
    tokenizer = tiny.get_processor().tokenizer
    ids, expected = _expected_reasoning_tokens(tokenizer, ANSWER)
    mask = reasoning_token_mask(ids, tokenizer)
    assert [k for k, m in enumerate(mask) if m] == expected
    assert expected == list(range(expected[0], expected[-1] + 1))  # one contiguous run
    assert CONTENT in tokenizer.decode(ids[expected[0]:expected[-1] + 1])
    assert reasoning_token_mask(tokenizer('{"score": [1, 2]}', add_special_tokens=False)["input_ids"],
                                tokenizer) is None


# ---------------------------------------------------------------------------------------------------------------
# Extraction with hooks during generation == a manual computation from output_attentions
# ---------------------------------------------------------------------------------------------------------------


def _manual_attention(model, processor, example, result):
    """One forward pass over the whole sequence (prompt + generated) with ``output_attentions=True``; returns
    ``token_maps(rows)``: per image, the attention of the query ``rows`` over its tokens, mean over heads,
    the layers of ``result`` and the rows."""
    import torch

    from modeling_miescore.hub.processing_miescore import as_edit_sample

    inputs = sc_prompt_inputs(model, processor, as_edit_sample(example).load())
    ids = torch.tensor([result.sequence_ids])
    prompt = result.prompt_length
    assert torch.equal(ids[0, :prompt], inputs["input_ids"][0])
    types = torch.cat([inputs["mm_token_type_ids"], inputs["mm_token_type_ids"].new_zeros(1, ids.shape[1] - prompt)], 1)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=inputs["pixel_values"],
                    image_grid_thw=inputs["image_grid_thw"], mm_token_type_ids=types, output_attentions=True)
    attention = torch.stack([out.attentions[i][0] for i in result.layers])  # layers, heads, queries, keys
    positions = (ids[0, :prompt] == model.config.image_token_id).nonzero().flatten()

    def token_maps(rows):
        mean = attention[:, :, torch.tensor(rows)].double().mean((0, 1, 2))
        maps, start = [], 0
        for t, h, w in inputs["image_grid_thw"].tolist():
            count = t * h * w // 4
            maps.append(mean[positions[start:start + count]].reshape(h // 2, w // 2).numpy())
            start += count
        return maps

    return token_maps


def _check_against_manual(result, manual):
    assert len(manual) == len(result.token_maps)
    for ours, theirs in zip(result.token_maps, manual):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    for grid_map, theirs in zip([*result.source_maps, result.edited_map], manual):
        np.testing.assert_allclose(grid_map, resize_to_grid(theirs, 24, "area"), atol=1e-6)
    np.testing.assert_allclose(result.image_shares, [m.sum() for m in manual], atol=1e-5)


def test_eager_switch_is_announced_once_and_hooks_need_it(tiny_path):
    import torch

    from modeling_miescore.analysis.attention_maps import GeneratedRowRecorder, use_eager_attention
    from modeling_miescore.scoring.loading import load_spatialreward

    fresh = load_spatialreward(str(tiny_path), device="cpu", dtype="float32")
    assert fresh.config.get_text_config()._attn_implementation == "sdpa"
    ids = torch.tensor([[5, 6, 7, 8]])
    with pytest.raises(RuntimeError, match="eager"), GeneratedRowRecorder(decoder_attention_layers(fresh, 5), 2,
                                                                           torch.tensor([0, 1])):
        fresh(input_ids=ids)
    messages = []
    assert use_eager_attention(fresh, log=messages.append) is True
    assert use_eager_attention(fresh, log=messages.append) is False
    assert len(messages) == 1 and "'sdpa' to 'eager'" in messages[0]
    assert fresh.config.get_text_config()._attn_implementation == "eager"
    assert fresh.config.vision_config._attn_implementation == "sdpa"  # the vision tower keeps its kernel
    with torch.no_grad(), GeneratedRowRecorder(decoder_attention_layers(fresh, 5), 2, torch.tensor([0, 1])) as rec:
        out = fresh(input_ids=ids, output_attentions=True)
    positions, rows = rec.rows()  # one pass over 4 tokens: queries 2 and 3 are "generated"
    assert positions == [2, 3] and rows.shape == (2, 2)
    expected = torch.stack([a[0, :, 2:, :2] for a in out.attentions]).mean((0, 1))
    torch.testing.assert_close(rows, expected.float(), atol=1e-6, rtol=0)


def test_hooks_equal_output_attentions_all_tokens(tiny, examples):
    processor = tiny.get_processor()
    example = examples[2]  # three sources: four image spans
    result = extract_attention_maps(tiny, example, processor, tokens="all", log=None)
    assert tiny.config.get_text_config()._attn_implementation == "eager"
    generated = len(result.sequence_ids) - result.prompt_length
    assert generated == 6  # the checkpoint's budget; no end token from random weights
    # every generated token fed back to the model (all but the last) is a query row
    assert result.query_positions == list(range(result.prompt_length, len(result.sequence_ids) - 1))
    assert result.layers == [0, 1]  # the tiny model has 2 layers: "last 5" takes both
    assert result.source_maps[0].shape == (24, 24) and result.edited_map.sum() == pytest.approx(1.0)
    manual = _manual_attention(tiny, processor, example, result)(result.query_positions)
    assert len(manual) == len(example["sources"]) + 1
    _check_against_manual(result, manual)
    assert set(result.metrics) >= {"entropy_gap", "source_entropy", "concentration"}
    assert [i for i, _ in decoder_attention_layers(tiny, 1)] == [1]


def test_hooks_keep_only_reasoning_tokens(tiny, examples, monkeypatch):
    """A generation forced to a SpatialReward-style answer: only its reasoning tokens are queries."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    processor = tiny.get_processor()
    tokenizer = processor.tokenizer
    answer_ids, reasoning = _expected_reasoning_tokens(tokenizer, ANSWER)
    forced = answer_ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    class Force(LogitsProcessor):
        def __init__(self, prompt_length):
            self.prompt_length = prompt_length

        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - self.prompt_length
            out = torch.full_like(scores, -float("inf"))
            out[:, forced[step]] = 0.0
            return out

    generate = tiny.generate
    monkeypatch.setattr(tiny, "generate", lambda **kw: generate(
        **kw, logits_processor=LogitsProcessorList([Force(kw["input_ids"].shape[1])])))
    example = examples[0]
    result = extract_attention_maps(tiny, example, processor, max_new_tokens=len(forced) + 4)
    assert result.sequence_ids[result.prompt_length:] == forced  # stopped at <|im_end|>
    assert result.token_selection == "reasoning" and result.note is None
    assert [p - result.prompt_length for p in result.query_positions] == reasoning
    token_maps = _manual_attention(tiny, processor, example, result)
    _check_against_manual(result, token_maps(result.query_positions))
    every_row = token_maps(list(range(result.prompt_length, len(result.sequence_ids) - 1)))
    assert not np.allclose(every_row[0], result.token_maps[0], atol=1e-5, rtol=0)  # the selection matters


# ---------------------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def edits_file(tmp_path_factory, examples):
    from modeling_miescore.data.example_edits import save_example_files

    folder = tmp_path_factory.mktemp("edits")
    chosen = examples[:3]
    records = save_example_files(chosen, folder, relative=True)
    lines = [json.dumps({"id": e["id"], **r}) for e, r in zip(chosen, records)]
    lines.insert(1, json.dumps({"id": "no-image", "sources": ["missing.png"], "edited": records[0]["edited"],
                                "instruction": "x"}))
    path = folder / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(capsys, *argv):
    from modeling_miescore.cli.main import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_writes_metrics_table_maps_and_overlays(capsys, tiny_path, edits_file, tmp_path):
    from PIL import Image

    out = tmp_path / "attention"
    code, stdout, stderr = _run(capsys, "analyze-attention", "--model", tiny_path, "--input", edits_file,
                                "--out", out, "--device", "cpu", "--label", "Tiny", "--no-progress")
    assert code == 1, stderr  # one bad line, skipped and reported
    assert "line 2" in stderr and "missing.png" in stderr and "eager" in stderr
    metrics = json.loads((out / "metrics.json").read_text())
    for name in ("entropy_gap", "source_entropy", "concentration", "stability"):
        assert set(metrics[name]) >= {"mean", "std"} and metrics[name]["mean"] is not None
    assert metrics["n"] == 3 and metrics["stability"]["n"] == 3  # pairs of 3 edits
    assert [s["id"] for s in metrics["samples"]] == ["cat-coffee", "astronaut-rocket", "cat-astronaut-coffee"]
    values = [s["source_entropy"] for s in metrics["samples"]]
    assert metrics["source_entropy"]["mean"] == pytest.approx(np.mean(values))
    assert metrics["source_entropy"]["std"] == pytest.approx(np.std(values))
    assert all(0 < s["source_entropy"] <= math.log(576) + 1e-9 for s in metrics["samples"])
    assert metrics["settings"]["failed_lines"][0]["line"] == 2
    maps = np.load(out / "maps.npz", allow_pickle=False)
    assert maps["source_maps"].shape == (3, 24, 24) and list(maps["num_sources"]) == [2, 2, 3]
    np.testing.assert_allclose(maps["source_maps"].sum((1, 2)), 1.0)
    assert entropy(maps["source_maps"][2]) == pytest.approx(metrics["samples"][2]["source_entropy"])
    for sample in metrics["samples"]:
        with Image.open(out / sample["overlay"]) as picture:
            assert picture.format == "PNG" and picture.width > picture.height
    assert len(list((out / "overlays").iterdir())) == 3
    assert "| Tiny | 3 |" in (out / "table.md").read_text() and "| Tiny | 3 |" in stdout


def test_cli_user_errors_exit_2(capsys, tiny_path, edits_file, tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    code, _, stderr = _run(capsys, "analyze-attention", "--model", tiny_path, "--input", edits_file, "--out", a_file)
    assert code == 2 and "is a file" in stderr and len(stderr.strip().splitlines()) == 1
    code, _, stderr = _run(capsys, "analyze-attention", "--model", tiny_path, "--input", tmp_path / "none.jsonl",
                           "--out", tmp_path / "o")
    assert code == 2 and "does not exist" in stderr
    code, _, stderr = _run(capsys, "analyze-attention", "--model", tiny_path, "--input", edits_file,
                           "--out", tmp_path / "o", "--on-error", "stop", "--no-progress", "--device", "cpu")
    assert code == 2 and "line 2" in stderr and "--on-error skip" in stderr
