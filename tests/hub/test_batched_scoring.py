"""The batched scoring loop (modeling_miescore.hub.batched_scoring) with a recording score function: no model."""

from __future__ import annotations

import pytest
from PIL import Image

from modeling_miescore.hub.batched_scoring import PrefixGrouping, eval_mode, score_in_batches
from modeling_miescore.hub.errors import MIEScoreInputError


def image(width: int, height: int = 32, shade: int = 0) -> Image.Image:
    return Image.new("RGB", (width, height), (shade, 0, 0))


def edit(sample_id: str, sources, width: int, instruction: str = "add a hat") -> dict:
    return {"id": sample_id, "sources": sources, "edited": image(width, shade=7), "instruction": instruction}


class Recorder:
    """A ``score`` function that returns each sample's id and remembers every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, loaded, handle):
        self.calls.append(([s.id for s in loaded], handle))
        return [f"result:{s.id}" for s in loaded]


def width_of_edited(sample) -> int:
    return sample.edited.size[0]


def test_results_in_input_order_with_batches_sorted_by_length():
    widths = [50, 10, 40, 20, 30]
    samples = [edit(f"s{i}", [image(8, shade=i)], w) for i, w in enumerate(widths)]
    score = Recorder()
    results = score_in_batches(samples, score, batch_size=2, length=width_of_edited)
    assert results == [f"result:s{i}" for i in range(5)]
    # sorted by length (10, 20, 30, 40, 50), then cut into batches of 2
    assert score.calls == [(["s1", "s3"], None), (["s4", "s2"], None), (["s0"], None)]


def test_chunks_bound_what_is_decoded_and_sorted_together():
    samples = [edit(f"s{i}", [image(8, shade=i)], w) for i, w in enumerate([40, 30, 20, 10])]
    score = Recorder()
    results = score_in_batches(samples, score, batch_size=1, chunk_size=2, length=width_of_edited)
    assert results == [f"result:s{i}" for i in range(4)]
    # each chunk of two is sorted on its own: s1 before s0, then s3 before s2
    assert [ids for ids, _ in score.calls] == [["s1"], ["s0"], ["s3"], ["s2"]]


def test_groups_share_a_handle_run_first_and_are_closed_after_their_last_call():
    shared = [image(16, shade=1), image(16, shade=2)]
    samples = [
        edit("single", [image(16, shade=9)], 60),
        edit("g0", shared, 30), edit("g1", shared, 10), edit("g2", shared, 20),
        edit("other-instruction", shared, 25, instruction="remove the hat"),
    ]
    opened, closed = [], []

    def open_group(first):
        opened.append(first.id)
        return f"prefix-of-{first.id}"

    score = Recorder()
    grouping = PrefixGrouping(batch_size=2, open=open_group, close=closed.append)
    results = score_in_batches(samples, score, batch_size=4, length=width_of_edited, grouping=grouping)
    assert results == [f"result:{s['id']}" for s in samples]
    # the group (same sources and instruction) first, sorted and split by grouping.batch_size; then the rest
    assert score.calls == [(["g1", "g2"], "prefix-of-g0"), (["g0"], "prefix-of-g0"),
                           (["other-instruction", "single"], None)]
    assert opened == ["g0"] and closed == ["prefix-of-g0"]


def test_whole_groups_in_input_order_and_groups_that_are_only_checked():
    shared = [image(16, shade=3)]
    samples = [edit("a", shared, 30), edit("b", shared, 10), edit("c", [image(16, shade=4)], 20)]
    score = Recorder()
    score_in_batches(samples, score, batch_size=8, length=width_of_edited, grouping=PrefixGrouping())
    assert score.calls == [(["a", "b"], True), (["c"], None)]  # a whole group per call, input order

    score = Recorder()
    score_in_batches(samples, score, batch_size=8, length=width_of_edited, grouping=PrefixGrouping(share=False))
    assert score.calls == [(["b", "c", "a"], None)]  # nothing shared: every sample runs alone
    with pytest.raises(ValueError, match="samples 0 and 2 are both in group 'x'"):
        score_in_batches(samples, score, batch_size=8, group_ids=["x", "y", "x"],
                         grouping=PrefixGrouping(share=False))


def test_bad_arguments_are_clear_errors():
    samples = [edit("a", [image(8)], 10), {"sources": [], "edited": image(8), "instruction": "x"}]
    for bad in (0, 1.5, "8", True):  # issue 22 item 22: 1.5 was rounded down to 1
        with pytest.raises(MIEScoreInputError, match=f"batch_size must be an integer >= 1, got {bad!r}"):
            score_in_batches(samples[:1], Recorder(), batch_size=bad)
    with pytest.raises(ValueError, match="got 3 group ids for 1 samples"):
        score_in_batches(samples[:1], Recorder(), batch_size=1, group_ids=[1, 2, 3])
    with pytest.raises(MIEScoreInputError, match="sample 1 has zero source images"):
        score_in_batches(samples, Recorder(), batch_size=1)


def test_progress_bar_only_when_asked(capsys):
    samples = [edit(f"s{i}", [image(8)], 10 + i) for i in range(3)]
    score_in_batches(samples, Recorder(), batch_size=2, progress=True, desc="judging")
    err = capsys.readouterr().err
    assert "judging" in err and "3/3" in err
    score_in_batches(samples, Recorder(), batch_size=2)
    assert capsys.readouterr().err == ""


def test_eval_mode_restores_the_training_flag():
    torch = pytest.importorskip("torch")
    module = torch.nn.Linear(2, 2).train()
    with pytest.raises(RuntimeError):
        with eval_mode(module):
            assert not module.training
            raise RuntimeError("scoring failed")
    assert module.training
