"""Tests for modeling_miescore.hub.spatialreward_parsing (SC/PQ generation parser).

The corpus below is table-driven: each case gives the text, the parser, the expected parse_ok,
the expected score pair, the number of regions and the issue codes that must be present (and,
optionally, codes that must be absent).
"""

import json
import random
import time

import pytest

from modeling_miescore.hub.spatialreward_parsing import (
    GROUNDING_ISSUES,
    ISSUE_CODES,
    MAX_INPUT_CHARS,
    ParsedOutput,
    parse_output,
    parse_pq_output,
    parse_sc_output,
)

# --------------------------------------------------------------------------------------------
# Valid outputs in the exact formats of appendix D.1
# --------------------------------------------------------------------------------------------

# D.1.1: { "edit_region" : [...], "reasoning" : "...", "score" : [...] } with regions
# [{"id": 0~n, "label": ..., "bbox_2d": [x1, y1, x2, y2]}], <|bbox_{id}|> before each region and
# <|global|> before the overall assessment.
D11_VALID = (
    '{ "edit_region" : [{"id": 0, "label": "red car on the left", "bbox_2d": [102, 388, 455, 731]}, '
    '{"id": 1, "label": "sky", "bbox_2d": [0, 0, 1000, 312]}], '
    '"reasoning" : "The <|bbox_0|>car has been recolored to red as instructed. The <|bbox_1|>sky is '
    'now overcast. <|global|> The rest of the scene, lighting and layout are preserved.", '
    '"score" : [22, 19] }'
)
# D.1.1 with a failed edit: "If editing failed (images look identical), use empty list: []"
D11_FAILED = (
    '{ "edit_region" : [], "reasoning" : "<|global|> The two images look identical; the '
    'instruction was not executed.", "score" : [0, 25] }'
)
# D.1.2: several sources; the reasoning uses only <|bbox_{id}|> (no <|global|> asked for).
D12_VALID = (
    '{ "edit_region" : [{"id": 0, "label": "dog from image 1", "bbox_2d": [50, 400, 420, 950]}, '
    '{"id": 1, "label": "hat from image 2", "bbox_2d": [120, 300, 260, 420]}], '
    '"reasoning" : "The <|bbox_0|>dog is integrated on the grass and wears the <|bbox_1|>hat '
    'from the second input; the fusion is coherent.", "score" : [21, 18] }'
)
# D.1.3: { "reasoning" : "...", "score" : [naturalness, artifacts] }
D13_VALID = (
    '{ "reasoning" : "Lighting and shadows are consistent; slight blur on the left hand.", '
    '"score" : [21, 17] }'
)

REGION = '{"id": 0, "label": "cat", "bbox_2d": [100, 200, 300, 400]}'


def sc_json(regions="[" + REGION + "]", reasoning="The <|bbox_0|>cat is red. <|global|> Fine.",
            score="[18, 20]"):
    return '{"edit_region": %s, "reasoning": "%s", "score": %s}' % (regions, reasoning, score)


# (id, parser, text, kwargs, parse_ok, scores, n_regions, required issues, forbidden issues)
SC, PQ = "sc", "pq"
CASES = [
    # ---- valid paper formats ----
    ("d11_valid", SC, D11_VALID, {}, True, (22.0, 19.0), 2, [], list(ISSUE_CODES)),
    ("d11_failed_edit", SC, D11_FAILED, {}, True, (0.0, 25.0), 0, [], list(ISSUE_CODES)),
    ("d12_valid_multi", SC, D12_VALID, {"num_sources": 2}, True, (21.0, 18.0), 2, [],
     list(ISSUE_CODES)),
    ("d12_as_single_source", SC, D12_VALID, {}, True, (21.0, 18.0), 2,
     ["missing_global_token"], []),
    ("d13_valid", PQ, D13_VALID, {}, True, (21.0, 17.0), 0, [], list(ISSUE_CODES)),
    ("decimal_scores", PQ, '{"reasoning": "ok", "score": [20.5, 17.25]}', {}, True,
     (20.5, 17.25), 0, [], ["score_clamped"]),
    # ---- empty / no JSON ----
    ("empty", SC, "", {}, False, (None, None), 0, ["empty_output"], []),
    ("whitespace", PQ, " \n\t ", {}, False, (None, None), 0, ["empty_output"], []),
    ("prose_only_with_numbers", SC, "I would rate this 18 and 20 out of 25.", {}, False,
     (None, None), 0, ["no_json_object", "missing_score"], []),
    # ---- boxes but no scores: coordinates must never become scores ----
    ("boxes_no_scores", SC,
     '{"edit_region": [{"id": 3, "label": "x", "bbox_2d": [120, 340, 560, 780]}], '
     '"reasoning": "<|bbox_3|> x <|global|> y"}', {}, False, (None, None), 1,
     ["missing_score"], ["score_from_fallback"]),
    ("bare_region_list_no_scores", SC,
     'Regions: [{"id": 0, "label": "a", "bbox_2d": [12, 24, 560, 780]}] done', {}, False,
     (None, None), 0, ["no_json_object", "missing_score"], []),
    ("truncated_in_regions", SC,
     '{"edit_region": [{"id": 0, "label": "a", "bbox_2d": [100, 200, 300, 400]}, '
     '{"id": 1, "label": "b", "bbox_2d": [5', {}, False, (None, None), 1,
     ["truncated_json", "missing_score"], []),
    # ---- truncated JSON ----
    ("truncated_in_reasoning", SC,
     '{"edit_region": [' + REGION + '], "reasoning": "The <|bbox_0|>cat is red and the',
     {}, False, (None, None), 1, ["truncated_json", "missing_score"], []),
    ("truncated_inside_score", SC,
     '{"edit_region": [], "reasoning": "<|global|> ok", "score": [18, 2', {}, False,
     (None, None), 0, ["truncated_json", "missing_score"], []),
    ("truncated_after_score", SC,
     '{"edit_region": [' + REGION + '], "score": [12, 14], "reasoning": "The <|bbox_0|>cat',
     {}, True, (12.0, 14.0), 1, ["truncated_json", "score_from_fallback"], []),
    # ---- prose, think blocks, fences ----
    ("prose_around_json", SC, "Sure! Here is my evaluation:\n" + sc_json() + "\nHope it helps.",
     {}, True, (18.0, 20.0), 1, ["extra_text_around_json"], []),
    ("think_block", SC,
     '<think>First draft {"score": [1, 2]} maybe 3 4.</think>\n' + sc_json(), {}, True,
     (18.0, 20.0), 1, ["think_block_removed"], ["extra_text_around_json"]),
    ("think_prefix_closed_only", PQ,
     'the opening tag was in the prompt {"score": [3, 3]}</think>' + D13_VALID, {}, True,
     (21.0, 17.0), 0, ["think_block_removed"], []),
    ("unclosed_think", PQ, '<think>Let me look at the image... {"reasoning": "x", "score": [5, 5]',
     {}, False, (None, None), 0, ["unclosed_think_block", "no_json_object"], []),
    ("code_fence", SC, "```json\n" + sc_json() + "\n```", {}, True, (18.0, 20.0), 1,
     ["code_fence_removed"], ["extra_text_around_json"]),
    # ---- relaxed syntax ----
    ("single_quotes", SC,
     "{'edit_region': [{'id': 0, 'label': 'cat', 'bbox_2d': [100, 200, 300, 400]}], "
     "'reasoning': 'The <|bbox_0|>cat's fur is red. <|global|> Fine.', 'score': [17, 21]}",
     {}, True, (17.0, 21.0), 1, ["json_repaired"], ["missing_global_token"]),
    ("trailing_commas", PQ, '{"reasoning": "ok", "score": [20, 15,],}', {}, True, (20.0, 15.0),
     0, ["json_repaired"], []),
    ("python_literals", PQ, '{"reasoning": "ok", "score": [20, 15], "done": True, "x": None}', {},
     True, (20.0, 15.0), 0, ["json_repaired"], []),
    ("unescaped_inner_quotes", PQ, '{"reasoning": "The "vintage" look is natural", '
     '"score": [19, 18]}', {}, True, (19.0, 18.0), 0, ["json_repaired"], []),
    ("nested_braces_in_reasoning", SC,
     sc_json(reasoning='The <|bbox_0|>sign reads {OPEN} }} {{ [x] <|global|> rest is fine.'),
     {}, True, (18.0, 20.0), 1, [], ["json_repaired", "truncated_json"]),
    ("escaped_quotes_in_reasoning", PQ,
     '{"reasoning": "a \\"quoted\\" word and a brace \\" } {", "score": [10, 11]}', {}, True,
     (10.0, 11.0), 0, [], ["json_repaired"]),
    ("raw_newlines_in_string", PQ, '{"reasoning": "line one\nline two", "score": [9, 8]}', {},
     True, (9.0, 8.0), 0, [], ["json_repaired"]),
    # ---- scores in odd shapes ----
    ("scores_as_strings", SC, sc_json(score='["18", "20/25"]'), {}, True, (18.0, 20.0), 1,
     ["score_from_string"], ["score_rescaled"]),
    ("score_other_scale", PQ, '{"reasoning": "ok", "score": ["7/10", "8/10"]}', {}, True,
     (17.5, 20.0), 0, ["score_from_string", "score_rescaled"], []),
    ("score_list_as_string", PQ, '{"reasoning": "ok", "score": "[18, 20]"}', {}, True,
     (18.0, 20.0), 0, ["score_from_string"], []),
    ("scalar_score", SC, sc_json(score="18"), {}, False, (18.0, None), 1, ["score_not_pair"],
     []),
    ("one_element_score", PQ, '{"reasoning": "ok", "score": [18]}', {}, False, (18.0, None), 0,
     ["score_not_pair"], []),
    ("three_scores", PQ, '{"reasoning": "ok", "score": [18, 19, 20]}', {}, True, (18.0, 19.0), 0,
     ["score_list_too_long"], []),
    ("non_numeric_score", PQ, '{"reasoning": "ok", "score": ["high", 20]}', {}, False,
     (None, 20.0), 0, ["score_invalid"], []),
    ("bool_score", PQ, '{"reasoning": "ok", "score": [true, 20]}', {}, False, (None, 20.0), 0,
     ["score_invalid"], []),
    ("nan_score", PQ, '{"reasoning": "ok", "score": [NaN, 20]}', {}, False, (None, 20.0), 0,
     ["score_invalid"], []),
    ("null_score", PQ, '{"reasoning": "ok", "score": null}', {}, False, (None, None), 0,
     ["missing_score"], []),
    ("score_dict", PQ, '{"reasoning": "ok", "score": {"naturalness": 20, "artifacts": 16}}', {},
     True, (20.0, 16.0), 0, ["score_from_dict"], []),
    ("scores_key_alias", PQ, '{"reasoning": "ok", "scores": [20, 16]}', {}, True, (20.0, 16.0), 0,
     ["key_alias"], []),
    ("out_of_range_scores", SC, sc_json(score="[31, -4]"), {}, True, (25.0, 0.0), 1,
     ["score_clamped"], []),
    ("out_of_range_string", PQ, '{"reasoning": "ok", "score": ["85", 12]}', {}, True,
     (25.0, 12.0), 0, ["score_clamped", "score_from_string"], []),
    # ---- missing fields / duplicates ----
    ("missing_reasoning", PQ, '{"score": [20, 20]}', {}, True, (20.0, 20.0), 0,
     ["missing_reasoning"], []),
    ("missing_edit_region", SC, '{"reasoning": "<|global|> ok", "score": [20, 20]}', {}, True,
     (20.0, 20.0), 0, ["missing_regions"], []),
    ("missing_score_key", SC, sc_json().replace(', "score": [18, 20]', ""), {}, False,
     (None, None), 1, ["missing_score"], ["score_from_fallback"]),
    ("duplicate_keys", PQ, '{"reasoning": "a", "score": [1, 2], "reasoning": "b", '
     '"score": [13, 14]}', {}, True, (13.0, 14.0), 0, ["duplicate_key"], []),
    ("duplicate_region_id", SC, sc_json(regions="[%s, %s]" % (REGION, REGION)), {}, True,
     (18.0, 20.0), 1, ["duplicate_region_id"], []),
    # ---- several objects ----
    ("two_objects_first_wins", PQ, '{"reasoning": "a", "score": [11, 12]}\n'
     '{"reasoning": "b", "score": [21, 22]}', {}, True, (11.0, 12.0), 0,
     ["multiple_json_objects", "extra_text_around_json"], []),
    ("non_output_object_first", PQ, 'Input was {"image": 1}. ' + D13_VALID, {}, True,
     (21.0, 17.0), 0, ["extra_text_around_json"], ["multiple_json_objects"]),
    ("broken_then_valid", PQ, '{"reasoning": "a", "score": [1, 2] oops}\n' + D13_VALID, {}, True,
     (21.0, 17.0), 0, ["invalid_json"], []),
    # ---- broken JSON: key-anchored fallback only ----
    ("broken_json_fallback", SC, '{"edit_region": [{"id": 0, "label": "a", "bbox_2d": '
     '[100, 200, 300, 400]}] "reasoning": "x" "score": [15, 16]} junk }', {}, True, (15.0, 16.0),
     0, ["score_from_fallback"], []),
    ("fallback_ambiguous", PQ, '{"score": [15, 16] bad "score": [3, 4]', {}, False, (None, None), 0,
     ["fallback_ambiguous"], ["score_from_fallback"]),
    ("fallback_needs_quoted_key", PQ, "{ broken: score: [15, 16]", {}, False, (None, None), 0,
     ["missing_score"], ["score_from_fallback"]),
    # ---- unicode ----
    ("unicode", SC, sc_json(reasoning="Le <|bbox_0|>chat est rouge — très bien 🐱. "
                                      "<|global|> 背景保持不变。"), {}, True, (18.0, 20.0), 1,
     [], ["json_repaired"]),
    ("unicode_escapes", PQ, '{"reasoning": "caf\\u00e9 \\ud83d\\ude00", "score": [20, 20]}', {},
     True, (20.0, 20.0), 0, [], []),
    # ---- grounding tokens ----
    ("region3_only_bbox0_tokens", SC,
     sc_json(regions='[{"id": 3, "label": "lamp", "bbox_2d": [10, 10, 90, 90]}]',
             reasoning="The <|bbox_0|>lamp is lit. <|bbox_0|> again. <|global|> ok"),
     {}, True, (18.0, 20.0), 1, ["bbox_token_without_region", "region_without_bbox_token"], []),
    ("global_twice", SC, sc_json(reasoning="<|bbox_0|>cat <|global|> a <|global|> b"), {}, True,
     (18.0, 20.0), 1, ["global_token_repeated"], ["missing_global_token"]),
    ("global_twice_multi", SC, sc_json(reasoning="<|bbox_0|>cat <|global|> a <|global|> b"),
     {"num_sources": 3}, True, (18.0, 20.0), 1, ["global_token_repeated"], []),
    ("bbox_token_repeated", SC, sc_json(reasoning="<|bbox_0|>cat <|bbox_0|>cat <|global|> ok"),
     {}, True, (18.0, 20.0), 1, ["bbox_token_repeated"], []),
    ("spaced_tokens", SC, sc_json(reasoning="The <| bbox_0 |>cat is red. <| GLOBAL |> Fine."),
     {}, True, (18.0, 20.0), 1, ["token_normalized"],
     ["missing_global_token", "region_without_bbox_token"]),
    ("html_escaped_tokens", SC, sc_json(reasoning="The &lt;|bbox_0|&gt;cat. &lt;|global|&gt; ok"),
     {}, True, (18.0, 20.0), 1, ["token_normalized"], ["missing_global_token"]),
    ("token_id_out_of_vocab", SC, sc_json(reasoning="<|bbox_0|>cat <|bbox_16|>x <|global|> ok"),
     {}, True, (18.0, 20.0), 1, ["bbox_id_out_of_vocab", "bbox_token_without_region"], []),
    ("pq_with_tokens_and_regions", PQ,
     '{"edit_region": [' + REGION + '], "reasoning": "<|global|> fine", "score": [20, 20]}', {},
     True, (20.0, 20.0), 0, ["unexpected_grounding_token", "unexpected_regions"], []),
    # ---- boxes ----
    ("bbox_clamp_and_swap", SC,
     sc_json(regions='[{"id": 0, "label": "a", "bbox_2d": [900, -5, 100, 1200]}]'), {}, True,
     (18.0, 20.0), 1, ["bbox_clamped", "bbox_reordered"], []),
    ("bbox_invalid_dropped", SC,
     sc_json(regions='[{"id": 0, "label": "a", "bbox_2d": [1, 2, 3]}]'), {}, True, (18.0, 20.0),
     0, ["region_invalid", "bbox_token_without_region"], []),
    ("region_string_id_and_float_box", SC,
     sc_json(regions='[{"id": "0", "label": "a", "bbox_2d": [10.4, "20", 300.6, 400]}]'), {},
     True, (18.0, 20.0), 1, [], ["region_missing_id", "region_invalid"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_corpus(case):
    _, task, text, kwargs, ok, scores, n_regions, required, forbidden = case
    res = parse_output(text, task, **kwargs)
    assert isinstance(res, ParsedOutput)
    assert res.parse_ok is ok, res.issues
    assert res.score_pair == scores, res.issues
    assert len(res.regions) == n_regions, (res.regions, res.issues)
    for code in required:
        assert code in res.issues, (code, res.issues)
    for code in forbidden:
        assert code not in res.issues, (code, res.issues)
    assert "internal_error" not in res.issues
    assert set(res.issues) <= set(ISSUE_CODES)
    assert res.raw == text
    json.dumps(res.to_dict())  # serialisable


def test_corpus_size():
    assert len(CASES) >= 30


# --------------------------------------------------------------------------------------------
# Detailed checks
# --------------------------------------------------------------------------------------------


def test_d11_fields():
    r = parse_sc_output(D11_VALID)
    assert r.task == "sc" and r.parse_ok and r.score_source == "json"
    assert r.s_if == 22.0 and r.s_con == 19.0
    assert r.scores == {"s_if": 22.0, "s_con": 19.0}
    assert r.regions == [
        {"id": 0, "label": "red car on the left", "bbox_2d": [102, 388, 455, 731]},
        {"id": 1, "label": "sky", "bbox_2d": [0, 0, 1000, 312]},
    ]
    assert r.preamble == "The"
    assert r.region_reasoning == {
        0: "car has been recolored to red as instructed. The",
        1: "sky is now overcast.",
    }
    assert r.global_reasoning == "The rest of the scene, lighting and layout are preserved."
    assert r.issues == [] and r.issue_details == [] and r.grounding_ok
    d = r.to_dict()
    assert d["scores"] == {"s_if": 22.0, "s_con": 19.0}
    assert d["region_reasoning"]["0"].startswith("car")


def test_pq_fields():
    r = parse_pq_output(D13_VALID)
    assert r.task == "pq" and r.naturalness == 21.0 and r.artifacts == 17.0
    assert r.s_if is None and r.regions == [] and r.global_reasoning is None
    assert r.reasoning.startswith("Lighting")


def test_tokens_normalised_in_reasoning():
    r = parse_sc_output(sc_json(reasoning="The <| bbox_0 |>cat. <|Global|> ok"))
    assert r.reasoning == "The <|bbox_0|>cat. <|global|> ok"
    assert r.region_reasoning == {0: "cat."} and r.global_reasoning == "ok"


def test_multi_source_global_is_optional_but_allowed():
    r = parse_sc_output(D11_VALID, num_sources=2)
    assert r.issues == [] and r.num_sources == 2
    r = parse_sc_output(D12_VALID, num_sources=1)
    assert "missing_global_token" in r.issues


def test_grounding_issue_does_not_change_parse_ok():
    r = parse_sc_output(sc_json(reasoning="no tokens at all"))
    assert r.parse_ok
    assert {"missing_global_token", "region_without_bbox_token"} <= set(r.issues)
    assert not r.grounding_ok


def test_clamp_messages_recorded():
    r = parse_sc_output(sc_json(score="[31, -4]"))
    msgs = [d["message"] for d in r.issue_details if d["code"] == "score_clamped"]
    assert len(msgs) == 2 and "31" in msgs[0] and "-4" in msgs[1]


def test_coordinates_never_become_scores():
    # Many numbers, all of them coordinates or ids; the anchors' "first two numbers" fallback
    # would return 12 and 24 here.
    text = ('{"edit_region": [{"id": 12, "label": "a", "bbox_2d": [24, 36, 480, 720]}], '
            '"reasoning": "<|bbox_12|> 5 of 7 things <|global|> 9/10", "scor": [1, 2]}')
    r = parse_sc_output(text)
    assert not r.parse_ok and r.score_pair == (None, None)
    broken = text.replace("]}],", "]}]")  # now broken JSON as well
    r = parse_sc_output(broken)
    assert not r.parse_ok and r.score_pair == (None, None)


def test_huge_garbage_is_fast():
    rng = random.Random(0)
    alphabet = '{}[]"\':,\\ abcxyz0123456789<|>\n'
    garbage = "".join(rng.choice(alphabet) for _ in range(1_000_000))
    for text in (garbage, "{" * 1_000_000, '{"score": [' * 100_000, "x" * 1_000_000,
                 '{"reasoning": "' + 'a "' * 300_000):
        t0 = time.perf_counter()
        r = parse_sc_output(text)
        assert time.perf_counter() - t0 < 5.0
        assert "internal_error" not in r.issues
        assert not r.parse_ok
    assert "input_too_long" in parse_sc_output(garbage).issues


def test_valid_json_after_long_prefix_within_limit():
    text = "x" * (MAX_INPUT_CHARS - 1000) + D13_VALID
    assert parse_pq_output(text).parse_ok


def test_type_errors():
    for bad in (None, b'{"score": [1, 2]}', 3, ["a"]):
        with pytest.raises(TypeError):
            parse_sc_output(bad)
        with pytest.raises(TypeError):
            parse_pq_output(bad)
    with pytest.raises(TypeError):
        parse_sc_output("{}", num_sources="2")
    with pytest.raises(ValueError):
        parse_output("{}", "xx")


def test_str_subclass_accepted():
    class S(str):
        pass

    assert parse_pq_output(S(D13_VALID)).parse_ok


def test_issue_code_registry():
    assert GROUNDING_ISSUES <= set(ISSUE_CODES)
    for code in ("score_clamped", "bbox_clamped", "missing_global_token",
                 "bbox_token_without_region", "region_without_bbox_token", "duplicate_key",
                 "truncated_json", "extra_text_around_json", "think_block_removed"):
        assert code in ISSUE_CODES


# --------------------------------------------------------------------------------------------
# Property-style: random garbage never raises
# --------------------------------------------------------------------------------------------

_FRAGMENTS = [
    "{", "}", "[", "]", '"', "'", ":", ",", "\\", "\\u12", "score", '"score"', "reasoning",
    '"edit_region"', "bbox_2d", "<|bbox_0|>", "<| global |>", "&lt;|bbox_1|&gt;", "<think>",
    "</think>", "```json", "```", "True", "None", "NaN", "-1e999", "1e400", "18/25", "0/0",
    "12", "3.5", "-7", " ", "\n", "é", "🐱", "\x00", "\ud800", "/", "9" * 400,
]


def _random_text(rng):
    kind = rng.random()
    if kind < 0.4:
        return "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 60)))
    if kind < 0.7:
        return "".join(chr(rng.randint(0, 0x2FF)) for _ in range(rng.randint(0, 200)))
    # mutate a valid output
    base = rng.choice([D11_VALID, D12_VALID, D13_VALID, D11_FAILED])
    chars = list(base)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.4 and chars:
            del chars[min(pos, len(chars) - 1)]
        elif op < 0.8:
            chars.insert(pos, rng.choice(_FRAGMENTS))
        else:
            chars = chars[:pos]
    return "".join(chars)


@pytest.mark.parametrize("seed", range(4))
def test_random_garbage_never_raises(seed):
    rng = random.Random(seed)
    for _ in range(500):
        text = _random_text(rng)
        for res in (parse_sc_output(text), parse_sc_output(text, num_sources=3),
                    parse_pq_output(text)):
            assert isinstance(res.parse_ok, bool)
            assert "internal_error" not in res.issues, (text, res.issue_details)
            for v in res.scores.values():
                assert v is None or 0.0 <= v <= 25.0
            if res.parse_ok:
                assert all(v is not None for v in res.scores.values())
            for reg in res.regions:
                assert len(reg["bbox_2d"]) == 4
                assert all(isinstance(c, int) and 0 <= c <= 1000 for c in reg["bbox_2d"])
                x1, y1, x2, y2 = reg["bbox_2d"]
                assert x1 <= x2 and y1 <= y2
            json.dumps(res.to_dict())
