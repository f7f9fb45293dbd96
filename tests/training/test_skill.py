"""Skill optimisation (MIEScore paper, eqs. 5-8): edits and their bounds, answer parsing, the loop with
deterministic fake backends, resume, the OpenAI-compatible and local transformers backends, set-skill and the
trainer script."""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

from modeling_miescore.data.schema import DIMENSIONS
from modeling_miescore.evaluation.metrics.correlation import srcc
from modeling_miescore.training.skill import (
    EditBounds,
    Edit,
    EvalRecord,
    Generation,
    SkillEditError,
    SkillEvaluator,
    SkillHistoryError,
    SkillOptConfig,
    SkillOptimizer,
    apply_edits,
    build_evaluator_prompt,
    number_lines,
    optimize_skill,
    parse_evaluator_output,
    parse_optimizer_output,
    read_history,
    select_failures,
    skill_lines,
    skill_text,
    to_skill_sample,
    validation_srcc,
)

REPO = Path(__file__).resolve().parents[2]
SKILL = "Rate multi-source edits.\nLook at every source.\nBe strict about artifacts.\n"
BOUNDS = EditBounds(max_edits=3, max_line_chars=80, max_skill_chars=400)


# ------------------------------------------------------------------------------------------------------------
# fixtures and fakes
# ------------------------------------------------------------------------------------------------------------


def _mos(tag: str, seed: int = 0) -> tuple:
    h = hashlib.sha256(f"{seed}:{tag}".encode()).digest()
    return tuple(5.0 + 90.0 * h[i] / 255.0 for i in range(3))


def make_rows(examples, n: int, prefix: str, seed: int = 0) -> list:
    """In-memory MIE-Bench rows reusing the example images; the instruction carries a tag the fakes read."""
    rows = []
    for i in range(n):
        ex = examples[i % len(examples)]
        tag = f"{prefix}{i}"
        vq, if_, ap = _mos(tag, seed)
        rows.append({"id": tag, "instruction": f"{ex['instruction']} [#{tag}]", "source_images": ex["sources"],
                     "edited_image": ex["edited"], "mos_vq": vq, "mos_if": if_, "mos_ap": ap})
    return rows


def _prompt_text(parts) -> str:
    return "".join(p for p in parts if isinstance(p, str))


def _tag(parts) -> str:
    return re.search(r"\[#([^\]]+)\]", _prompt_text(parts)).group(1)


def fake_answer(skill: str, tag: str, mos: dict) -> str:
    if "BREAK RULE" in skill:
        return "I cannot decide on a score."
    if "BAD RULE" in skill:
        scores = [5 - m / 20 for m in mos[tag]]
    elif "GOOD RULE" in skill:
        scores = [m / 20 for m in mos[tag]]
    else:
        h = hashlib.sha256(tag.encode()).digest()
        scores = [5 * h[i] / 255 for i in range(3)]
    body = dict(zip(DIMENSIONS, (round(s, 4) for s in scores)))
    return "Reasoning: the cat {is} placed.\n" + json.dumps(body)


class FakeEvaluatorBackend:
    """Deterministic f(S, x): its answer depends only on the prompt. Rules in the skill switch behaviour:
    BREAK RULE -> unparsable answers, BAD RULE -> inverted scores, GOOD RULE -> scores equal to the MOS,
    otherwise hash noise (a weak baseline)."""

    def __init__(self, mos: dict):
        self.mos = mos
        self.calls = 0

    def answer(self, parts) -> str:
        return fake_answer(parts[0], _tag(parts), self.mos)

    def generate(self, prompts, max_new_tokens):
        self.calls += len(prompts)
        return [Generation(self.answer(p)) for p in prompts]


GOOD_PROPOSAL = json.dumps({"candidates": [
    {"rationale": "invert", "edits": [{"op": "add", "after": 0, "text": "BAD RULE: reward what humans punish."}]},
    {"rationale": "align", "edits": [{"op": "add", "after": 1, "text": "GOOD RULE: rate exactly as humans do."}]},
    {"rationale": "broken", "edits": [{"op": "delete", "line": 999}]},
]})


class FakeOptimizerBackend:
    """O(S, E): answers from a function of the prompt (pure, so a resumed run gets the same answers) or from a
    list consumed one per call."""

    def __init__(self, answers=None):
        self.answers = answers
        self.prompts = []

    def generate(self, prompts, max_new_tokens):
        assert len(prompts) == 1 and len(prompts[0]) == 1 and isinstance(prompts[0][0], str)
        self.prompts.append(prompts[0][0])
        if self.answers is None:
            return [Generation(GOOD_PROPOSAL)]
        answer = self.answers.pop(0)
        return [answer if isinstance(answer, Generation) else Generation(answer)]


@pytest.fixture(scope="module")
def data(examples):
    train = make_rows(examples, 10, "t")
    val = make_rows(examples, 8, "v")
    mos = {r["id"]: (r["mos_vq"], r["mos_if"], r["mos_ap"]) for r in train + val}
    return train, val, mos


def _config(**kw):
    base = dict(num_iterations=2, num_candidates=3, train_samples_per_iteration=6, num_failures=3,
                max_edits_per_candidate=BOUNDS.max_edits, max_line_chars=BOUNDS.max_line_chars,
                max_skill_chars=BOUNDS.max_skill_chars, seed=7)
    base.update(kw)
    return SkillOptConfig(**base)


def _run(data, tmp_path, config=None, optimizer_backend=None, evaluator_backend=None, skill=SKILL, name="h.jsonl"):
    train, val, mos = data
    config = config or _config()
    ev_backend = evaluator_backend or FakeEvaluatorBackend(mos)
    opt_backend = optimizer_backend or FakeOptimizerBackend()
    evaluator = SkillEvaluator(ev_backend, score_max=config.score_max, batch_size=4)
    optimizer = SkillOptimizer(opt_backend, k=config.num_candidates, bounds=config.bounds())
    result = optimize_skill(train, val, evaluator, optimizer, initial_skill=skill, config=config,
                            history_path=tmp_path / name, progress=False)
    return result, ev_backend, opt_backend


# ------------------------------------------------------------------------------------------------------------
# skills as numbered lines; edits and bounds
# ------------------------------------------------------------------------------------------------------------


def test_lines_round_trip_and_numbering():
    from modeling_miescore.hub.skill_miescore import DEFAULT_SKILL

    assert skill_text(skill_lines(DEFAULT_SKILL)) == DEFAULT_SKILL
    assert skill_lines("a\r\nb\n") == ["a", "b"]
    assert number_lines(SKILL).splitlines() == ["1| Rate multi-source edits.", "2| Look at every source.",
                                                "3| Be strict about artifacts."]


def test_apply_add_delete_replace_use_the_original_numbering():
    new = apply_edits(SKILL, [Edit("delete", 1), Edit("replace", 3, "  Penalise seams. "), Edit("add", 0, "Top."),
                              Edit("add", 3, "Last.")], EditBounds(max_edits=4))
    assert new == "Top.\nLook at every source.\nPenalise seams.\nLast.\n"
    # several adds after one line keep their order
    assert apply_edits(SKILL, [Edit("add", 1, "x"), Edit("add", 1, "y")]).splitlines()[1:3] == ["x", "y"]


@pytest.mark.parametrize("edits, code", [
    ([Edit("add", 4, "x")], "line_out_of_range"),
    ([Edit("add", -1, "x")], "line_out_of_range"),
    ([Edit("delete", 0)], "line_out_of_range"),
    ([Edit("replace", 4, "x")], "line_out_of_range"),
    ([Edit("add", 0, "a")] * 4, "too_many_edits"),
    ([], "no_edits"),
    ([Edit("replace", 1, "x" * 81)], "line_too_long"),
    ([Edit("add", 1, "two\nlines")], "multi_line_text"),
    ([Edit("replace", 2, "   ")], "empty_text"),
    ([Edit("delete", 2), Edit("replace", 2, "x")], "conflicting_edits"),
    ([Edit("delete", 1), Edit("delete", 2), Edit("delete", 3)], "empty_skill"),
    ([Edit("replace", 1, "Rate multi-source edits.")], "no_change"),
    ([Edit("move", 1, "x")], "wrong_schema"),
])
def test_edit_bounds_are_enforced(edits, code):
    with pytest.raises(SkillEditError) as err:
        apply_edits(SKILL, edits, BOUNDS)
    assert err.value.code == code


def test_skill_length_cap():
    long = "y" * 79
    with pytest.raises(SkillEditError) as err:
        apply_edits(SKILL, [Edit("add", 3, long)] * 3, EditBounds(max_edits=3, max_line_chars=80, max_skill_chars=250))
    assert err.value.code == "skill_too_long"
    assert len(apply_edits(SKILL, [Edit("add", 3, long)] * 2, EditBounds(3, 80, 250))) <= 250


# ------------------------------------------------------------------------------------------------------------
# optimiser answers: garbage is rejected with a reason
# ------------------------------------------------------------------------------------------------------------


def test_optimizer_output_valid_and_tolerated_forms():
    answer = ("<think>maybe {\"candidates\": []}</think>Here you go:\n```json\n"
              + json.dumps({"candidates": [{"rationale": "r", "edits": [{"op": "replace", "line": "2", "text": "New."}]}]})
              + "\n```")
    cands, errors = parse_optimizer_output(answer, SKILL, 2, BOUNDS)
    assert errors == [] and len(cands) == 1
    assert cands[0].skill == "Rate multi-source edits.\nNew.\nBe strict about artifacts.\n"
    assert cands[0].rationale == "r" and cands[0].edits == [{"op": "replace", "line": 2, "text": "New."}]
    # a bare list of edits is one candidate; a list of candidates works too
    cands, _ = parse_optimizer_output('[{"op": "delete", "line": 3}]', SKILL, 2, BOUNDS)
    assert [c.skill for c in cands] == ["Rate multi-source edits.\nLook at every source.\n"]
    cands, _ = parse_optimizer_output('[{"edits": [{"op": "delete", "line": 3}]}, [{"op": "delete", "line": 1}]]',
                                      SKILL, 2, BOUNDS)
    assert len(cands) == 2 and all(c.skill for c in cands)
    # bracketed prose before the JSON is skipped
    cands, errors = parse_optimizer_output('Step [1], see {note}: {"edits": [{"op": "delete", "line": 2}]}', SKILL, 2,
                                           BOUNDS)
    assert errors == [] and cands[0].skill == "Rate multi-source edits.\nBe strict about artifacts.\n"


@pytest.mark.parametrize("answer, code", [
    ("I would add a line about seams.", "invalid_json"),
    ('{"candidates": [{"edits": [{"op": "add", "after": 1, "text": "x"}, {"op": "del', "invalid_json"),  # cut off
    ('{"suggestion": "add a line"}', "wrong_schema"),
    ('{"candidates": {"edits": []}}', "wrong_schema"),
    ('See [1] and [2]: {"candidates": []}', "no_candidates"),
])
def test_optimizer_garbage_whole_answer(answer, code):
    cands, errors = parse_optimizer_output(answer, SKILL, 3, BOUNDS)
    assert cands == [] and [e["code"] for e in errors] == [code]


def test_optimizer_garbage_per_candidate():
    answer = json.dumps({"candidates": [
        {"edits": [{"op": "add", "line": 9, "text": "x"}]},
        {"edits": [{"op": "delete", "line": 1}, {"op": "delete", "line": 2}, {"op": "delete", "line": 3}]},
        {"edits": "add a line"},
        {"edits": [{"op": "replace", "line": True, "text": "x"}]},
        {"edits": [{"op": "replace", "line": 1, "text": 5}]},
        {"edits": [{"op": "add", "after": 0, "text": "New first line."}]},
        {"edits": [{"op": "add", "after": 0, "text": "New first line."}]},
    ]})
    cands, errors = parse_optimizer_output(answer, SKILL, 8, BOUNDS)
    assert errors == []
    assert [c.error for c in cands] == ["line_out_of_range", "empty_skill", "wrong_schema", "wrong_schema",
                                        "wrong_schema", None, "duplicate_candidate"]
    assert all(c.skill is None for c in cands if c.error) and all(c.error_message for c in cands if c.error)
    cands, errors = parse_optimizer_output(answer, SKILL, 2, BOUNDS)
    assert len(cands) == 2 and errors[0]["code"] == "too_many_candidates"


# ------------------------------------------------------------------------------------------------------------
# evaluator answers
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ('{"visual_quality": 4, "instruction_following": 3.5, "attribute_preservation": "2"}', (4.0, 3.5, 2.0)),
    ('The {red} cup. {"note": "x"} {"VQ": 1, "IF": 2, "AP": 3}', (1.0, 2.0, 3.0)),
    ('Quoted: {"vq": 1, "if": 2, "ap": 3}. Verdict: {"vq": 1, "if": 2, "ap": 3}', (1.0, 2.0, 3.0)),
    ('<think>{"vq": 0, "if": 0, "ap": 0}</think>{"scores": {"visual_quality": 1, "instruction_following": 2, '
     '"attribute_preservation": 3}, "reasoning": "a } in text"}', (1.0, 2.0, 3.0)),
])
def test_evaluator_parse_ok(text, expected):
    parsed = parse_evaluator_output(text, 5)
    assert parsed.error is None and tuple(parsed.scores[d] for d in DIMENSIONS) == expected


@pytest.mark.parametrize("text, code", [
    ("", "empty_output"),
    ("Visual quality 4, instruction following 3, attribute preservation 2.", "no_json_object"),
    ('{"visual_quality": 4, "instruction_following": 3}', "missing_key"),
    ('{"visual_quality": 4, "instruction_following": 3, "attribute_preservation": 7}', "score_out_of_range"),
    ('{"visual_quality": -1, "instruction_following": 3, "attribute_preservation": 2}', "score_out_of_range"),
    ('{"visual_quality": "good", "instruction_following": 3, "attribute_preservation": 2}', "score_invalid"),
    ('{"visual_quality": true, "instruction_following": 3, "attribute_preservation": 2}', "score_invalid"),
    ('{"visual_quality": 4, "instruction_following": 3, "attribute_preservation": 2', "no_json_object"),
    # an instruction quoting a score object, then the model's own verdict: never the injected numbers
    ('The instruction {"vq": 5, "if": 5, "ap": 5} asks... {"vq": 1, "if": 2, "ap": 3}', "ambiguous_json"),
    ('{"vq": 1, "if": 2, "ap": 3, "vq": 5}', "ambiguous_json"),
])
def test_evaluator_parse_failures_are_never_scored(text, code):
    parsed = parse_evaluator_output(text, 5)
    assert parsed.scores is None and parsed.error == code


def test_evaluator_parse_0_100_scale():
    text = '{"visual_quality": 71, "instruction_following": 40, "attribute_preservation": 99.5}'
    assert parse_evaluator_output(text, 100).scores["attribute_preservation"] == 99.5
    assert parse_evaluator_output(text, 5).error == "score_out_of_range"


def test_evaluator_records_parse_failures_and_objective_skips_them(data):
    train, val, mos = data
    rows = val + train
    broken = {"v1": "no scores today", "v2": '{"visual_quality": 9, "instruction_following": 1, '
              '"attribute_preservation": 1}', "t3": '{"visual_quality": 1}'}

    class Mixed(FakeEvaluatorBackend):
        def generate(self, prompts, max_new_tokens):
            out = []
            for p in prompts:
                tag = _tag(p)
                out.append(Generation(None, "HTTP 500") if tag == "t4" else Generation(broken.get(tag, self.answer(p))))
            return out

    samples = [to_skill_sample(r, i) for i, r in enumerate(rows)]
    records = SkillEvaluator(Mixed(mos), batch_size=5).evaluate("GOOD RULE\n", samples)
    errors = {r.id: r.error for r in records if r.error}
    assert set(errors) == {"v1", "v2", "t3", "t4"}
    assert errors["v1"] == "no_json_object" and errors["v2"] == "score_out_of_range"
    assert errors["t3"] == "missing_key" and errors["t4"].startswith("backend_error")
    assert all(r.pred is None for r in records if r.error) and all(r.pred for r in records if not r.error)
    assert records[1].raw == "no scores today"
    result = validation_srcc(records)
    assert result["n"] == 18 and result["n_parsed"] == 14
    ok = [r for r in records if r.pred]
    expected = sum(srcc([r.pred[j] for r in ok], [r.mos[j] for r in ok]) for j in range(3)) / 3
    assert result["objective"] == pytest.approx(expected) == pytest.approx(1.0)
    assert validation_srcc(records, min_coverage=0.9)["objective"] is None


def test_constant_dimension_counts_as_zero():
    records = [EvalRecord(str(i), (3.0, float(i), float(i)), (10.0 * i, 10.0 * i, 10.0 * i)) for i in range(5)]
    result = validation_srcc(records)
    assert result["srcc"]["visual_quality"] is None
    assert result["objective"] == pytest.approx(2 / 3)


def test_failures_are_the_largest_deviations(data):
    train, _, mos = data
    by_id = {r["id"]: to_skill_sample(r) for r in train}
    records = [EvalRecord("t0", (0.0, 0.0, 0.0), (100.0, 100.0, 100.0)),
               EvalRecord("t1", (2.5, 2.5, 2.5), (50.0, 50.0, 50.0)),
               EvalRecord("t2", (5.0, 0.0, 2.5), (50.0, 50.0, 50.0)),
               EvalRecord("t3", None, (50.0, 50.0, 50.0), "no_json_object", "blah")]
    failures = select_failures(records, by_id, num_failures=2, num_unparsed=1, min_deviation=0.0)
    assert [f["id"] for f in failures] == ["t0", "t2", "t3"]
    assert failures[0]["deviation"] == pytest.approx(3 ** 0.5)
    assert failures[2]["pred"] is None and failures[2]["error"] == "no_json_object"


def test_evaluator_prompt_order():
    sample = to_skill_sample({"id": "a", "instruction": "do it", "sources": ["S1", "S2"], "edited": "E",
                              "mos_vq": 1, "mos_if": 2, "mos_ap": 3})
    parts = build_evaluator_prompt(SKILL, sample, 5)
    images = [p for p in parts if p in ("S1", "S2", "E")]
    assert images == ["S1", "S2", "E"] and parts[0].startswith(SKILL.rstrip())
    text = _prompt_text([p for p in parts if p not in ("S1", "S2", "E")])
    assert text.index("Source image 2:") < text.index("Editing instruction: do it") < text.index("Edited image:")
    assert '"attribute_preservation": <score>' in text and "from 0 to 5" in text


# ------------------------------------------------------------------------------------------------------------
# the loop
# ------------------------------------------------------------------------------------------------------------


def test_two_iterations_choose_the_improving_candidate(data, tmp_path):
    result, ev, opt = _run(data, tmp_path)
    it0, it1 = result.iterations
    assert it0["chosen"] == 1 and "GOOD RULE" in it0["skill"]
    statuses = [(c["status"], c["error"]) for c in it0["candidates"]]
    assert statuses == [("evaluated", None), ("evaluated", None), ("rejected", "line_out_of_range")]
    vals = [c["val"]["objective"] if c["val"] else None for c in it0["candidates"]]
    assert vals[1] == pytest.approx(1.0) and vals[0] == pytest.approx(-1.0) and vals[2] is None
    assert result.initial_val["objective"] < 0.9
    # iteration 1: the best candidate only ties the current skill, so the current skill is kept
    assert it1["chosen"] is None and it1["skill"] == it1["skill_before"] == it0["skill"]
    assert result.skill == "Rate multi-source edits.\nGOOD RULE: rate exactly as humans do.\nLook at every source.\n" \
                           "Be strict about artifacts.\n"
    assert result.val["objective"] == pytest.approx(1.0)
    # eq. 6: the optimiser saw the current numbered skill and the failures of the rollouts
    assert "1| Rate multi-source edits." in opt.prompts[0] and "deviation" in opt.prompts[0]
    assert len(it0["failures"]) == 3 and it0["train"]["n"] == 6
    devs = [f["deviation"] for f in it0["failures"]]
    assert devs == sorted(devs, reverse=True)
    # ... and, for contrast, the best-agreeing rollouts (smallest deviations, not among the failures)
    good = [f["deviation"] for f in it0["successes"]]
    assert len(good) == 2 and good == sorted(good) and max(good) <= min(devs)
    assert not {f["id"] for f in it0["successes"]} & {f["id"] for f in it0["failures"]}
    assert "For contrast" in opt.prompts[0] and f"[{it0['successes'][0]['id']}]" in opt.prompts[0]
    assert [r["id"] for r in it0["rollouts"]] == sorted(r["id"] for r in it0["rollouts"]) and len(it0["rollouts"]) == 6
    # cost: initial val (8) + per iteration: rollouts (6) + 2 valid candidates x val (16)
    assert ev.calls == 8 + 2 * (6 + 16)
    # the history holds what the brief asks for, one JSON line per record
    records = read_history(tmp_path / "h.jsonl")
    assert [r["type"] for r in records] == ["start", "iteration", "iteration"]
    assert records[1]["optimizer_raw"] == GOOD_PROPOSAL and records[1]["optimizer_errors"] == []
    assert records[0]["initial_skill"] == SKILL


def test_resume_gives_identical_results(data, tmp_path):
    full, _, _ = _run(data, tmp_path, name="full.jsonl")
    _run(data, tmp_path, config=_config(num_iterations=1), name="split.jsonl")
    resumed, ev, opt = _run(data, tmp_path, name="split.jsonl")
    assert resumed.skill == full.skill
    assert read_history(tmp_path / "split.jsonl") == read_history(tmp_path / "full.jsonl")
    assert ev.calls == 6 + 16 and len(opt.prompts) == 1  # only iteration 1 was computed
    # rerunning a finished run computes nothing
    again, ev, opt = _run(data, tmp_path, name="split.jsonl")
    assert again.skill == full.skill and ev.calls == 0 and opt.prompts == []


def test_resume_drops_a_cut_off_last_line_and_refuses_other_settings(data, tmp_path):
    _run(data, tmp_path, config=_config(num_iterations=1))
    path = tmp_path / "h.jsonl"
    with open(path, "a") as f:
        f.write('{"type": "iteration", "iteration": 1, "skill": "trunc')
    result, _, _ = _run(data, tmp_path)
    assert len(result.iterations) == 2 and "trunc" not in path.read_text()
    with pytest.raises(SkillHistoryError, match="settings.seed"):
        _run(data, tmp_path, config=_config(seed=8))
    with pytest.raises(SkillHistoryError, match="initial_skill_sha"):
        _run(data, tmp_path, skill="Another skill.\n")
    path.write_text('{"type": "start"}\nnot json\n{"type": "iteration"}\n')
    with pytest.raises(SkillHistoryError, match="line 2"):
        read_history(path)


def test_optimizer_garbage_is_logged_and_the_loop_continues(data, tmp_path):
    answers = [
        "Sure! I suggest to be stricter.",
        '{"proposal": "be stricter"}',
        json.dumps({"candidates": [{"edits": [{"op": "delete", "line": n} for n in (1, 2, 3)]},
                                   {"edits": [{"op": "replace", "line": 42, "text": "x"}]},
                                   {"edits": [{"op": "add", "after": 1, "text": "z" * 200}]},
                                   {"edits": [{"op": "add", "after": 1, "text": "a"}] * 5}]}),
        Generation(None, "ChatError[timeout]: no answer"),
        GOOD_PROPOSAL,
    ]
    config = _config(num_iterations=5, num_candidates=4)
    result, _, _ = _run(data, tmp_path, config=config, optimizer_backend=FakeOptimizerBackend(answers))
    its = result.iterations
    assert [e["code"] for e in its[0]["optimizer_errors"]] == ["invalid_json"]
    assert [e["code"] for e in its[1]["optimizer_errors"]] == ["wrong_schema"]
    assert [c["error"] for c in its[2]["candidates"]] == ["empty_skill", "line_out_of_range", "line_too_long",
                                                          "too_many_edits"]
    assert [e["code"] for e in its[3]["optimizer_errors"]] == ["backend_error"]
    assert all(it["chosen"] is None and it["skill"] == SKILL for it in its[:4])
    assert its[4]["chosen"] == 1 and "GOOD RULE" in result.skill


def test_unparsable_evaluator_keeps_the_loop_alive(data, tmp_path):
    train, val, mos = data

    class Garbage(FakeEvaluatorBackend):
        def answer(self, parts):
            return "!!garbage!!"

    result, _, opt = _run(data, tmp_path, config=_config(num_iterations=1), evaluator_backend=Garbage(mos))
    it = result.iterations[0]
    assert result.initial_val["objective"] is None and result.initial_val["n_parsed"] == 0
    assert it["chosen"] is None and it["rollout_errors"] == ["no_json_object"]
    assert [f["pred"] for f in it["failures"]] == [None, None]  # only the unparsed examples
    assert "could not be parsed" in opt.prompts[0]


def test_skill_that_breaks_the_evaluator_is_not_selected(data, tmp_path):
    proposal = json.dumps({"candidates": [{"edits": [{"op": "add", "after": 0, "text": "BREAK RULE"}]}]})
    result, _, _ = _run(data, tmp_path, config=_config(num_iterations=1, num_candidates=1),
                        optimizer_backend=FakeOptimizerBackend([proposal]))
    cand = result.iterations[0]["candidates"][0]
    assert cand["val"]["n_parsed"] == 0 and cand["val"]["objective"] is None
    assert result.iterations[0]["chosen"] is None and result.skill == SKILL


# ------------------------------------------------------------------------------------------------------------
# OpenAI-compatible backend against a local HTTP server
# ------------------------------------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    mos: dict = {}
    requests: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        content = body["messages"][0]["content"]
        text = "".join(p.get("text", "") for p in content)
        images = [p for p in content if p["type"] == "image_url"]
        if images:
            tag = re.search(r"\[#([^\]]+)\]", text).group(1)
            if tag == "v3":
                return self._send(400, {"error": {"message": "image too large"}})
            answer = "```json\n" + fake_answer(text.split("Source image 1:")[0], tag, self.mos) + "\n```"
        else:
            answer = GOOD_PROPOSAL
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": answer}}]})

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def chat_server(data):
    _, _, mos = data
    handler = type("Handler", (_Handler,), {"mos": mos, "requests": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_openai_backend_against_local_server(data, chat_server, monkeypatch):
    from modeling_miescore.training.skill import OpenAIBackend

    url, handler = chat_server
    train, val, mos = data
    monkeypatch.setenv("SKILL_TEST_KEY", "sk-test")
    backend = OpenAIBackend(url, "fake-vlm", api_key_env="SKILL_TEST_KEY", timeout=5, max_retries=0, num_workers=3,
                            max_pixels=64 * 64)
    samples = [to_skill_sample(r, i) for i, r in enumerate(val[:5])]
    records = SkillEvaluator(backend, batch_size=5).evaluate("GOOD RULE\n" + SKILL, samples)
    assert [r.id for r in records] == ["v0", "v1", "v2", "v3", "v4"]  # order kept with concurrent requests
    assert records[3].pred is None and records[3].error.startswith("backend_error: ChatError[http]")
    for r in records[:3] + records[4:]:
        assert r.pred == pytest.approx(tuple(m / 20 for m in mos[r.id]), abs=1e-3)
    req = handler.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["temperature"] == 0.0 and req["body"]["model"] == "fake-vlm"
    n_images = sum(p["type"] == "image_url" for p in req["body"]["messages"][0]["content"])
    assert n_images in (3, 4)  # sources + edited
    cands, errors, raw = SkillOptimizer(backend, k=3, bounds=BOUNDS).propose(SKILL, [])
    assert raw == GOOD_PROPOSAL and [c.error for c in cands] == [None, None, "line_out_of_range"]
    backend.close()


def test_openai_backend_connection_refused_is_a_recorded_failure(data):
    import socket

    from modeling_miescore.training.skill import OpenAIBackend

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", timeout=2, max_retries=0, num_workers=1)
    records = SkillEvaluator(backend).evaluate(SKILL, [to_skill_sample(data[1][0])])
    assert records[0].pred is None and "ChatError[connection]" in records[0].error


# ------------------------------------------------------------------------------------------------------------
# local transformers backend (tiny random Qwen3-VL: garbage answers -> recorded failures)
# ------------------------------------------------------------------------------------------------------------


def test_transformers_backend_tiny_checkpoint(data, tiny_qwen3vl_path, tmp_path):
    from modeling_miescore.training.skill import TransformersBackend

    train, val, mos = data
    backend = TransformersBackend(str(tiny_qwen3vl_path), device="cpu", dtype="float32", batch_size=2,
                                  max_pixels=64 * 64 * 4)
    gens = backend.generate([["Hello"], build_evaluator_prompt(SKILL, to_skill_sample(val[0]))], max_new_tokens=3)
    assert len(gens) == 2 and all(g.error is None and isinstance(g.text, str) for g in gens)
    # the same model as evaluator and optimiser: one iteration runs end to end, every answer a recorded failure
    config = _config(num_iterations=1, num_candidates=1, train_samples_per_iteration=1)
    evaluator = SkillEvaluator(backend, max_new_tokens=4, batch_size=2)
    optimizer = SkillOptimizer(backend, k=1, bounds=config.bounds(), max_new_tokens=4)
    result = optimize_skill(train[:1], val[:3], evaluator, optimizer, initial_skill=SKILL, config=config,
                            history_path=tmp_path / "h.jsonl", progress=False)
    it = result.iterations[0]
    assert result.skill == SKILL and it["chosen"] is None
    assert result.initial_val["n_parsed"] == 0 and it["train"]["n_parsed"] == 0
    assert [e["code"] for e in it["optimizer_errors"]] in (["invalid_json"], ["wrong_schema"])


# ------------------------------------------------------------------------------------------------------------
# miescore set-skill
# ------------------------------------------------------------------------------------------------------------


def test_set_skill_writes_config_and_model_reloads(tiny_miescore_path, tmp_path, capsys):
    from modeling_miescore.cli.main import main
    from modeling_miescore.scoring.loading import load_scorer

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_miescore_path, ckpt)
    before = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").chmod(0o640)
    new_skill = "Optimised rubric line 1.\nLine 2: penalise seams.\n"
    (tmp_path / "skill.txt").write_text(new_skill)
    assert main(["set-skill", str(ckpt), str(tmp_path / "skill.txt")]) == 0
    out = capsys.readouterr().out
    assert f"old {len(before['skill'])}" in out and f"new {len(new_skill)}" in out
    after = json.loads((ckpt / "config.json").read_text())
    assert after["skill"] == new_skill
    assert list(after) == list(before) and {k: v for k, v in after.items() if k != "skill"} == \
        {k: v for k, v in before.items() if k != "skill"}
    assert not [p for p in ckpt.iterdir() if p.name.endswith(".tmp")]
    assert (ckpt / "config.json").stat().st_mode & 0o777 == 0o640  # the file's permission bits are kept
    model = load_scorer(str(ckpt), device="cpu", dtype="float32")
    assert model.config.skill == new_skill


def test_set_skill_bad_input_exits_2(tiny_miescore_path, tiny_qwen3vl_path, tmp_path, capsys):
    from modeling_miescore.cli.main import main

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(Path(tiny_miescore_path) / "config.json", ckpt / "config.json")
    original = (ckpt / "config.json").read_bytes()
    good = tmp_path / "skill.txt"
    good.write_text("A rubric.\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    cases = [
        ([str(ckpt), str(empty)], "is empty"),
        ([str(ckpt), str(tmp_path / "missing.txt")], "does not exist"),
        ([str(ckpt), str(binary)], "not UTF-8"),
        ([str(tmp_path / "nope"), str(good)], "not a folder"),
        ([str(tmp_path), str(good)], "no config.json"),
        ([str(tiny_qwen3vl_path), str(good)], "not a MIEScore checkpoint"),
    ]
    qwen_config = (Path(tiny_qwen3vl_path) / "config.json").read_bytes()
    for argv, message in cases:
        assert main(["set-skill", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (ckpt / "config.json").read_bytes() == original
    assert (Path(tiny_qwen3vl_path) / "config.json").read_bytes() == qwen_config


# ------------------------------------------------------------------------------------------------------------
# the trainer script, end to end against the local server
# ------------------------------------------------------------------------------------------------------------


def _load_trainer():
    spec = importlib.util.spec_from_file_location("optimize_skill_script", REPO / "trainers" / "optimize_skill.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _write_dataset(rows_by_split, folder: Path):
    from datasets import Dataset, Features, Image, List, Value

    features = Features({"id": Value("string"), "instruction": Value("string"), "source_images": List(Image()),
                         "edited_image": Image(), "mos_vq": Value("float64"), "mos_if": Value("float64"),
                         "mos_ap": Value("float64")})
    (folder / "data").mkdir(parents=True)
    for split, rows in rows_by_split.items():
        Dataset.from_list(rows, features=features).to_parquet(str(folder / "data" / f"{split}-00000-of-00001.parquet"))


def test_trainer_script_end_to_end(data, chat_server, tmp_path, capsys):
    train, val, _ = data
    url, handler = chat_server
    dataset = tmp_path / "mie"
    _write_dataset({"train": train, "validation": val}, dataset)
    config = tmp_path / "cfg.yaml"
    config.write_text(f"dataset_name: {dataset}\nevaluator_backend: openai\nevaluator_model: fake\n"
                      f"evaluator_base_url: {url}\noptimizer_backend: openai\noptimizer_model: fake\n"
                      f"optimizer_base_url: {url}\nnum_iterations: 5\nnum_candidates: 3\n"
                      "train_samples_per_iteration: 4\nmax_retries: 0\nnum_workers: 4\nmax_pixels: 16384\n")
    trainer = _load_trainer()
    out = tmp_path / "out"
    argv = ["--config", str(config), "--output_dir", str(out), "--num_iterations", "1", "--progress", "false"]
    assert trainer.main(argv) == 0
    assert "1 iteration(s)" in capsys.readouterr().out
    assert (out / "skill.txt").read_text() == read_history(out / "history.jsonl")[-1]["skill"]
    history = read_history(out / "history.jsonl")
    assert history[1]["chosen"] == 1 and "GOOD RULE" in (out / "skill.txt").read_text()
    assert history[0]["val"]["n"] == 8 and history[0]["val"]["n_parsed"] == 7  # v3 answers HTTP 400
    n_requests = len(handler.requests)
    assert trainer.main(argv) == 0 and len(handler.requests) == n_requests  # resumed: nothing left to do
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chosen"] == [1]


def test_trainer_script_user_errors(tmp_path, capsys):
    trainer = _load_trainer()
    assert trainer.main(["--dataset_name", str(tmp_path / "missing"), "--output_dir", str(tmp_path / "o")]) == 2
    assert "could not load dataset" in capsys.readouterr().err
    assert trainer.main(["--dataset_name", "x", "--num_candidates", "0", "--output_dir", str(tmp_path / "o")]) == 2
    assert "num_candidates=0" in capsys.readouterr().err


def test_example_config_parses():
    trainer = _load_trainer()
    data_args, model_args, out_args, opt = trainer.make_parser().parse_args_and_config(
        args=["--config", str(REPO / "trainers" / "configs" / "optimize_skill_example.yaml")])
    assert isinstance(opt, SkillOptConfig) and out_args.output_dir == "runs/skill-optimization"
    assert opt.num_candidates == 4 and model_args.evaluator_backend == "transformers" and opt.score_max == 5
    assert data_args.val_split == "validation"


def test_dataset_splits_are_checked_without_decoding(data):
    from datasets import Dataset, Features, Image, List, Value

    from modeling_miescore.hub.errors import MIEScoreInputError
    from modeling_miescore.training.skill import SkillSampleSplit

    features = Features({"id": Value("string"), "instruction": Value("string"), "source_images": List(Image()),
                         "edited_image": Image(), "mos_vq": Value("float64"), "mos_if": Value("float64"),
                         "mos_ap": Value("float64")})
    rows = data[0][:4]
    samples = SkillSampleSplit(Dataset.from_list(rows, features=features), "train")
    assert not samples.decoded and samples.ids == ["t0", "t1", "t2", "t3"]
    got = samples[1:3]
    assert [s.id for s in got] == ["t1", "t2"] and got[0].mos == pytest.approx(_mos("t1"))
    assert got[0].edited.size == rows[1]["edited_image"].size and len(got[0].sources) == len(rows[1]["source_images"])
    bad = [dict(r) for r in rows]
    bad[2]["mos_if"] = float("nan")
    with pytest.raises(MIEScoreInputError, match="NaN mos_if in row 2"):
        SkillSampleSplit(Dataset.from_list(bad, features=features), "train")
    bad[2]["mos_if"], bad[3]["id"] = 50.0, "t0"
    with pytest.raises(MIEScoreInputError, match="'t0' twice"):
        SkillSampleSplit(Dataset.from_list(bad, features=features), "train")
    with pytest.raises(MIEScoreInputError, match="lacks the column"):
        SkillSampleSplit(Dataset.from_list(rows, features=features).remove_columns("mos_ap"), "validation")
