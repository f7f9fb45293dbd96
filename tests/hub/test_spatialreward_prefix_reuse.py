"""SpatialReward with shared-prefix reuse: the SC prefix (chat start + source images) of edits that share sources
and instruction runs once; greedy texts must equal the plain path's (tiny sharpened checkpoint, CPU)."""

import numpy as np
import pytest
import torch
from PIL import Image

from modeling_miescore.hub import modeling_spatialreward as sr_module
from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel, sc_messages
from modeling_miescore.hub.processing_miescore import image_size_kwargs

BATCH = 2  # a group of 3 then needs two generate calls


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    path = build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-sr", max_new_tokens=8)
    return SpatialRewardModel.from_pretrained(path).eval()


@pytest.fixture(scope="module")
def samples(examples):
    """Two groups interleaved with a singleton: 3 edits of 2 sources (three different edited sizes) and 2 edits of
    3 sources."""
    noise = Image.fromarray(np.random.default_rng(3).integers(0, 255, (96, 200, 3), dtype=np.uint8))
    two, three = examples[0], examples[2]
    assert len(two["sources"]) == 2 and len(three["sources"]) == 3

    def edit(base, edited):
        return {"sources": base["sources"], "edited": edited, "instruction": base["instruction"]}

    return [
        edit(two, two["edited"]),                 # 0: group of 2 sources, 160x107
        edit(three, three["edited"]),             # 1: group of 3 sources
        edit(examples[1], examples[1]["edited"]),  # 2: singleton (other sources)
        edit(two, examples[4]["edited"]),         # 3: 160x160
        edit(three, examples[1]["edited"]),       # 4
        edit(two, noise),                         # 5: 200x96
    ]


@pytest.fixture(scope="module")
def plain(model, samples):
    return model.evaluate_edits(samples, batch_size=BATCH, reuse_prefix=False)


def _texts(results):
    return [(r.raw_sc, r.raw_pq) for r in results]


def _spy(monkeypatch, name):
    calls = []
    original = getattr(sr_module, name)

    def wrapper(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(sr_module, name, wrapper)
    return calls


def test_reuse_gives_the_plain_path_texts(model, samples, plain, monkeypatch):
    prefixes = _spy(monkeypatch, "build_prefix_cache")
    calls = _spy(monkeypatch, "generate_from_prefix")
    reused = model.evaluate_edits(samples, batch_size=BATCH)

    # one prefix per group, also for the group of 3 that needs two generate calls (batch_size bounds each call:
    # BATCH SC rows + their BATCH PQ rows); the singleton took the plain path
    assert len(prefixes) == 2
    assert len({len(args[1]) for args, _ in prefixes}) == 2  # 2 and 3 sources: prefixes of different lengths
    assert sorted(args[2].shape[0] for args, _ in calls) == [2, 4, 4]

    assert _texts(reused) == _texts(plain)
    for a, b in zip(plain, reused):
        assert (a.reward, a.failed, a.failure_reasons) == (b.reward, b.failed, b.failure_reasons)
    # sensitivity: within a group the SC texts differ by edit, so a wrong image or position could show
    assert len({plain[i].raw_sc[0] for i in (0, 3, 5)}) >= 2


def test_packed_rows_equal_the_processor_prompts_and_positions(model, samples, monkeypatch):
    """Each SC row is [prefix | pads | suffix] whose real tokens are exactly the processor's prompt, with the
    positions ``get_rope_index`` gives over that full prompt; decoding continues at last + 1."""
    calls = _spy(monkeypatch, "generate_from_prefix")
    decode_positions = []
    original_forward = model.model.forward

    def forward(*args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] == 1 and not decode_positions:
            decode_positions.append(kwargs["position_ids"].clone())
        return original_forward(*args, **kwargs)

    monkeypatch.setattr(model.model, "forward", forward)
    group = [samples[i] for i in (1, 4)]  # 3 sources, one generate call: 2 SC rows then 2 PQ rows
    model.evaluate_edits(group, batch_size=BATCH)
    assert len(calls) == 1
    _, _, input_ids, attention_mask, position_ids, *_ = calls[0][0]

    processor = model.get_processor()
    from modeling_miescore.hub.processing_miescore import as_edit_sample

    loaded = [as_edit_sample(s).load() for s in group]
    order = sorted(range(2), key=lambda i: loaded[i].edited.size[0] * loaded[i].edited.size[1])
    for row, i in enumerate(order):
        sample = loaded[i]
        text = processor.apply_chat_template(sc_messages(model.config, 3, sample.instruction), tokenize=False,
                                             add_generation_prompt=True)
        ref = processor(text=[text], images=[*sample.sources, sample.edited], return_tensors="pt",
                        **image_size_kwargs(model.config))
        real = attention_mask[row].bool()
        assert torch.equal(input_ids[row][real], ref["input_ids"][0])
        rope, _ = model.model.get_rope_index(ref["input_ids"], ref["mm_token_type_ids"], ref["image_grid_thw"])
        assert torch.equal(position_ids[1:, row][:, real], rope[:, 0])
        assert torch.equal(position_ids[0, row][real], torch.arange(real.sum()))
        # first decoded token: every position row continues from the prompt's last real position
        assert torch.equal(decode_positions[0][1:, row, 0], rope[:, 0, -1] + 1)
    # the prefix ends with the edited image's <|vision_start|>; SC rows attend to it, PQ rows never do
    prefix_len = int((ref["input_ids"][0] == model.config.vision_start_token_id).nonzero()[-1]) + 1
    assert bool(attention_mask[:2, :prefix_len].all()) and not bool(attention_mask[2:, :prefix_len].any())


def test_explicit_groups(model, samples, plain, monkeypatch):
    calls = _spy(monkeypatch, "generate_from_prefix")
    chosen = [0, 2, 3, 5]
    # ids need not follow content: one content group may be split (here into a pair and a singleton)
    explicit = model.evaluate_edits([samples[i] for i in chosen], batch_size=BATCH, groups=["a", "s", "a", "a2"])
    assert _texts(explicit) == [_texts(plain)[i] for i in chosen]
    assert len(calls) == 1 and calls[0][0][2].shape[0] == 4  # only the pair shared a prefix
    with pytest.raises(ValueError, match=r"samples 0 and 1 are both in group 'x' but differ"):
        model.evaluate_edits(samples, batch_size=BATCH, groups=["x", "x", "s", "x", "y", "y"])
    with pytest.raises(ValueError, match="got 2 group ids for 6 samples"):
        model.evaluate_edits(samples, groups=["a", "b"])


def test_wrong_suffix_positions_are_caught(model, samples, plain, monkeypatch):
    """Negative control: suffix positions that restart at 0 (what a suffix-only rope gives, notes D3) change the
    SC texts of grouped edits, so the equality above is a real check."""
    original = sr_module.pack_rows_after_prefix

    def restart(prefix_ids, prefix_positions, rows, pad_id):
        rows = [(ids, pos - prefix_positions.max() - 1 if cont else pos, cont) for ids, pos, cont in rows]
        return original(prefix_ids, prefix_positions, rows, pad_id)

    monkeypatch.setattr(sr_module, "pack_rows_after_prefix", restart)
    group = [0, 3, 5]
    broken = model.evaluate_edits([samples[i] for i in group], batch_size=3)
    assert [r.raw_sc for r in broken] != [plain[i].raw_sc for i in group]
    assert [r.raw_pq for r in broken] == [plain[i].raw_pq for i in group]  # PQ rows never see the prefix


def test_sampling_keeps_the_plain_path(model, samples, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("prefix reuse must not run when sampling")

    monkeypatch.setattr(sr_module, "generate_from_prefix", fail)
    monkeypatch.setattr(model.config, "num_passes", 2)
    monkeypatch.setattr(model.config, "max_new_tokens", 2)
    results = model.evaluate_edits([samples[0], samples[3]], batch_size=2)
    assert [len(r.raw_sc) for r in results] == [2, 2]
    with pytest.raises(ValueError, match="differ in sources or instruction"):  # explicit groups still checked
        model.evaluate_edits([samples[0], samples[1]], groups=[1, 1])
