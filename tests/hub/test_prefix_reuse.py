import pytest

from edit_groups import instance_edits, max_score_diff
from modeling_miescore.scoring.loading import load_scorer
from modeling_miescore.testing.tiny_models import sharpen_language_model
from modeling_miescore.hub.prefix_reuse import find_groups, group_key
from modeling_miescore.hub.processing_miescore import as_edit_sample, load_samples


@pytest.fixture(scope="module")
def sharp_model(tiny_miescore_path):
    """The tiny scorer with larger random LM weights, so that a wrong position or a missing image changes the
    scores by whole points (with std-0.02 weights almost any input gives the same scores)."""
    return sharpen_language_model(load_scorer(str(tiny_miescore_path), device="cpu", dtype="float32"))


@pytest.mark.parametrize("sources_from, num_sources", [(0, 2), (2, 3)])
def test_prefix_reuse_equals_full_forward(sharp_model, examples, sources_from, num_sources):
    samples = instance_edits(examples, sources_from)
    assert len(samples[0]["sources"]) == num_sources
    samples.append({"sources": examples[1]["sources"], "edited": examples[1]["edited"],
                    "instruction": examples[1]["instruction"]})  # a singleton in the same call
    full = sharp_model.score_batch(samples, batch_size=3, reuse_prefix=False)
    reused = sharp_model.score_batch(samples, batch_size=3, reuse_prefix=True)
    assert max_score_diff(full, reused) < 1e-4
    assert max(r["overall"] for r in full) - min(r["overall"] for r in full) > 0.5  # the check is sensitive


def test_wrong_suffix_positions_would_be_caught(sharp_model, examples, monkeypatch):
    samples = instance_edits(examples, 0)
    full = sharp_model.score_batch(samples, batch_size=4, reuse_prefix=False)
    original = sharp_model.backbone.get_rope_index

    def shifted(input_ids, *args, **kwargs):
        positions, deltas = original(input_ids, *args, **kwargs)
        positions = positions.clone()
        positions[:, :, -20:] += 3  # what a suffix computed without the prefix's 3-D offsets looks like
        return positions, deltas

    monkeypatch.setattr(sharp_model.backbone, "get_rope_index", shifted)
    broken = sharp_model.score_batch(samples, batch_size=4, reuse_prefix=True)
    assert max_score_diff(full, broken) > 0.1


def test_explicit_groups_and_validation(sharp_model, examples):
    samples = instance_edits(examples, 0)[:4]
    auto = sharp_model.score_batch(samples, batch_size=2)
    explicit = sharp_model.score_batch(samples, batch_size=2, groups=["g"] * 4)
    assert max_score_diff(auto, explicit) < 1e-5
    mixed = [*samples[:2], {"sources": examples[2]["sources"], "edited": examples[2]["edited"],
                            "instruction": examples[2]["instruction"]}]
    with pytest.raises(ValueError, match="differ in sources or instruction"):
        sharp_model.score_batch(mixed, groups=["g", "g", "g"])


def test_find_groups_by_content_not_identity(examples):
    a = as_edit_sample({"sources": examples[0]["sources"], "edited": examples[0]["edited"],
                        "instruction": examples[0]["instruction"]}).load()
    copy = as_edit_sample({"sources": [s.copy() for s in examples[0]["sources"]], "edited": examples[3]["edited"],
                           "instruction": examples[0]["instruction"]}).load()
    other_text = as_edit_sample({"sources": examples[0]["sources"], "edited": examples[0]["edited"],
                                 "instruction": "something else"}).load()
    assert group_key(a) == group_key(copy) != group_key(other_text)
    assert find_groups([a, other_text, copy]) == [[0, 2], [1]]


def test_shared_source_files_are_decoded_once_and_grouped(examples, tmp_path):
    base = examples[0]
    base["sources"][0].save(tmp_path / "a.png")
    base["sources"][1].save(tmp_path / "b.png")
    by_path = [{"sources": [str(tmp_path / "a.png"), tmp_path / "b.png"], "edited": e["edited"],
                "instruction": base["instruction"]} for e in examples[:3]]
    in_memory = {"sources": base["sources"], "edited": examples[3]["edited"], "instruction": base["instruction"]}
    loaded = load_samples([as_edit_sample(s) for s in [*by_path, in_memory]])
    assert loaded[0].sources[0] is loaded[1].sources[0] is loaded[2].sources[0]  # str and Path name one file
    assert loaded[0].sources[1] is loaded[2].sources[1]
    # per-object digests are a cache only: decoded files and the in-memory originals still share one key
    assert find_groups(loaded) == [[0, 1, 2, 3]]
    assert [group_key(s) for s in loaded] == [group_key(loaded[3])] * 4
    changed = loaded[3].sources[0].copy()
    changed.putpixel((0, 0), (0, 0, 0) if changed.getpixel((0, 0)) != (0, 0, 0) else (255, 255, 255))
    loaded[3] = type(loaded[3])(sources=[changed, loaded[3].sources[1]], edited=loaded[3].edited,
                                instruction=loaded[3].instruction)
    assert find_groups(loaded) == [[0, 1, 2], [3]]  # one pixel apart is another group


def test_prepare_then_score_prepared_equals_score_batch_and_runs_no_forward_before(sharp_model, examples,
                                                                                   monkeypatch):
    """``prepare_batch`` does all the CPU work (groups, tokens, pixels, positions) without a forward pass;
    ``score_prepared`` then returns exactly what ``score_batch`` returns, groups and singles in input order."""
    samples = instance_edits(examples, 2)[:4]
    samples.insert(1, {"sources": examples[1]["sources"], "edited": examples[1]["edited"],
                       "instruction": examples[1]["instruction"]})  # a single between the group's members
    expected = sharp_model.score_batch(samples, batch_size=2)
    forwards = []
    monkeypatch.setattr(sharp_model.backbone, "forward", lambda *a, **k: forwards.append(1) or 1 / 0)
    prepared = sharp_model.prepare_batch(samples, batch_size=2)
    assert forwards == [] and len(prepared) == len(samples)
    assert sorted(type(call).__name__ for call in prepared.calls) == ["BatchFeature", "SharedPrefixInputs"]
    monkeypatch.undo()
    assert sharp_model.score_prepared(prepared) == expected
    # the same inputs scored twice: a prepared batch does not change when it runs
    assert sharp_model.score_prepared(prepared) == expected
