"""The SpatialReward data pipeline (sec. 3.3, prompts D.2): the prompts against the paper's text, each stage's
rules, and `miescore spatialreward-data` end to end against a real local chat-completions server with scripted
answers (good, malformed, refusals, 429, timeouts, a kill and a resume); the rows feed the SFT preparation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kill_resume import kill_then_resume
from local_http import RoutedChatServer, chat_completion, request_images, request_text
from paper_listings import assert_listings_match
from PIL import Image

from modeling_miescore.cli.main import main
from modeling_miescore.data.spatialreward_pipeline import prompts as P
from modeling_miescore.data.spatialreward_pipeline.alignment import parse_alignment
from modeling_miescore.data.spatialreward_pipeline.annotation import crop_region, parse_annotation, route
from modeling_miescore.data.spatialreward_pipeline.samples import EditRecord
from scripted_d2_judges import scripted_d2_answer
from modeling_miescore.data.spatialreward_chat_examples import check_row, prepare_sft_dataset

PAPER_D2 = Path(__file__).parents[2] / "fixtures" / "spatialreward_appendix_d2.txt"  # arXiv 2602.07458v4, appendix D.2
LISTINGS = {
    "Data Construction: Edit Region Grounding": P.GROUNDING_PROMPT,
    "Data Construction: SC Reasoning Generation (General Domain)": P.SC_GENERAL_PROMPT,
    "Data Construction: SC Reasoning Generation (Human Domain)": P.SC_HUMAN_PROMPT,
    "Data Construction: Perceptual Quality (PQ) Scoring": P.PQ_PROMPT,
    "Data Construction: Reasoning Consistency Check & Token Interleaving": P.ALIGNMENT_PROMPT,
}


def test_d2_prompts_are_the_paper_text_word_for_word():
    assert_listings_match(PAPER_D2, LISTINGS)
    assert "&lt;" not in "".join(LISTINGS.values()) and "’" not in "".join(LISTINGS.values())


def test_placeholders_are_filled_by_plain_replacement():
    text = P.fill(P.GROUNDING_PROMPT, instruction="add {two} hats", box_num=2)
    assert "**Editing Instruction**: add {two} hats" in text and "annotate exactly 2 region(s)" in text
    assert '{"id":"0~n", "label": "instance name"' in text and "{box_num}" not in text
    assert P.fill(P.SC_HUMAN_PROMPT, instruction="smile").endswith("Editing instruction: smile")
    assert "<|bbox_{id}|>" in P.ALIGNMENT_PROMPT  # the literal token template stays
    inputs = P.alignment_inputs_text("make it red", [{"id": 0, "label": "car", "bbox_2d": [1, 2, 3, 4]}], 'a "b"')
    assert '- edit_region: [{"id": 0, "label": "car", "bbox_2d": [1, 2, 3, 4]}]' in inputs
    assert '- Original Reasoning: "a \\"b\\""' in inputs and inputs.endswith("**Output:**\n")


# ------------------------------------------------------------------------------------------------ stage rules


def _record(instruction, **kw):
    return EditRecord("r", ["s.png"], "e.png", instruction, **kw)


# Routing cases: a person (or a feature only people have) makes an edit human-centric; body parts that animals and
# things have too do not.
HUMAN_EDITS = ("Make the man smile", "Give him a beard", "Change her hairstyle to a bob", "Make her eyes blue",
               "Turn the woman's head to the left", "Add sunglasses to the person", "Make the boy wave his hand",
               "Add red lipstick", "Brighten the skin in the portrait", "Put a crown on the bride")
GENERAL_EDITS = ("Change the cat's eyes to blue", "Remove the table leg", "Replace the clock face",
                 "Make the dog's ears floppy", "Paint the chair arms red", "Move the clock hands to noon",
                 "Give the fish a bigger mouth", "Add shell to the beach", "Open the bottle's mouth",
                 "Replace the car's headlights")


@pytest.mark.parametrize("instruction", HUMAN_EDITS)
def test_routing_sends_person_edits_to_the_face_judge(instruction):
    assert route(_record(instruction), []) == "human"


@pytest.mark.parametrize("instruction", GENERAL_EDITS)
def test_routing_keeps_body_parts_of_animals_and_things_general(instruction):
    assert route(_record(instruction), []) == "general"


def test_routing_rule():
    assert route(_record("Replace the car with a bus"), [{"label": "woman's hat"}]) == "human"  # a region label
    assert route(_record("Replace the car with a bus"), [{"label": "bus"}]) == "general"
    assert route(_record("Make the man smile", domain="general"), []) == "general"  # the record decides first
    assert route(_record("Recolour the sky", category="human_fine"), []) == "human"
    assert route(_record("Change the cat's eyes to blue"), [], human_words=("eyes",)) == "human"  # own word list


def _two_source_sample():
    from modeling_miescore.hub.processing_miescore import EditSample

    sources = [Image.new("RGB", (80, 60), (200, 200, 200)), Image.new("RGB", (50, 70), (180, 180, 220))]
    return EditSample(sources=sources, edited=Image.new("RGB", (80, 60), (90, 90, 90)),
                      instruction="Place the vase from image 2 on the table").load()


def _images(request):
    return [part for part in request.parts if isinstance(part, Image.Image)]


def test_sc_requests_annotate_the_sources_as_the_prompts_describe():
    """D.2.2 general: "Both images contain visual annotations"; human: a (Before Edit, After Edit) pair per region;
    with several sources the boxes go on each source and each gives a "before" crop."""
    from modeling_miescore.data.spatialreward_pipeline.annotation import sc_request

    sample = _two_source_sample()
    regions = [{"id": 0, "label": "vase", "bbox_2d": [100, 100, 600, 700]},
               {"id": 1, "label": "table", "bbox_2d": [0, 500, 1000, 1000]}]
    general = _images(sc_request(sample, regions, "general"))
    assert len(general) == 3
    plain = [*sample.sources, sample.edited]
    assert all(drawn.tobytes() != raw.tobytes() for drawn, raw in zip(general, plain))  # every image has the boxes
    human = sc_request(sample, regions, "human")
    texts = [p for p in human.parts if isinstance(p, str)]
    assert len(_images(human)) == 3 + 2 * 3  # full images, then per region: before (each source), after
    assert "Edit region 0 (vase), before edit (original image 1 of 2):" in texts
    assert "before edit (original image 2 of 2):" in texts and texts.count("after edit:") == 2
    crops = _images(human)[3:6]
    assert [c.size for c in crops] == [(64, 60), (50, 64), (64, 60)]  # each image cut on its own size (64 px min)
    only_edited = sc_request(sample, regions, "general", annotate_sources=False)
    assert [im.tobytes() for im in _images(only_edited)[:2]] == [im.tobytes() for im in sample.sources]
    assert len(_images(sc_request(sample, regions, "human", annotate_sources=False))) == 3 + 2


def test_grounding_asks_for_one_region_per_edit():
    from modeling_miescore.data.spatialreward_pipeline.grounding import GROUNDER_DECIDES, grounding_request

    sample = _two_source_sample()
    record = EditRecord("r", ["a.png", "b.png"], "e.png", sample.instruction, num_regions=3)  # a 3-edit row
    assert "annotate exactly 3 region(s)" in grounding_request(record, sample).parts[-1]
    plain = EditRecord("r", ["a.png", "b.png"], "e.png", sample.instruction)
    assert "annotate exactly 2 region(s)" in grounding_request(plain, sample).parts[-1]  # one per source
    text = grounding_request(record, sample, box_num_mode="grounder").parts[-1]
    assert f"**Number of Edit Regions**: {GROUNDER_DECIDES}" in text and "exactly 3" not in text


def test_our_answer_filters_can_be_turned_off():
    scores, _, outcome = parse_annotation('{"reasoning": "Good edit.", "score": [31, 18]}', "sc", 1,
                                          reject_unclean=False)
    assert outcome.status == "ok" and scores is not None
    drifted = "check_result: true\nSomething else entirely was described here instead."
    assert parse_alignment(drifted, "The hat is red. The rest is kept.", min_similarity=0)[1].status == "ok"


def test_crop_region_pads_keeps_a_minimum_size_and_stays_inside():
    image = Image.new("RGB", (400, 200))
    assert crop_region(image, [250, 250, 750, 750], padding=0.1).size == (240, 120)  # 200x100 box + 10 % a side
    small = crop_region(image, [0, 0, 10, 10], padding=0.0, min_side=64)
    assert small.size == (64, 64)  # grown to 64 px, slid back inside the top-left corner
    assert crop_region(image, [990, 990, 1000, 1000], padding=0.0, min_side=500).size == (400, 200)


@pytest.mark.parametrize("answer,regions,reason", [
    ('{"edit_region": [{"id": "1", "label": "hat", "bbox_2d": [10, 20, 300, 400]}, '
     '{"id": "2", "label": "cat", "bbox_2d": [500, 500, 900, 990]}]}',
     [{"id": 0, "label": "hat", "bbox_2d": [10, 20, 300, 400]},
      {"id": 1, "label": "cat", "bbox_2d": [500, 500, 900, 990]}], None),  # renumbered from the grounder's 1-based string ids
    ("```json\n{'edit_region': [{'id': '0', 'label': 'hat', 'bbox_2d': [1200, 20, 300, 400],}]}\n```",
     [{"id": 0, "label": "hat", "bbox_2d": [300, 20, 1000, 400]}], None),  # repaired, clamped, ordered
    ('{"edit_region": []}', [], None),  # a failed edit has no region
    ("", [], "grounding_unparsable"),
    ("The hat is on the head.", [], "grounding_unparsable"),
    ('{"edit_region": [{"id": 0, "label": "hat", "bbox_2d": [10, 20, 300', [], "grounding_unparsable"),
    ('{"edit_region": [{"id": 0, "label": "hat", "bbox_2d": [10, 20]}]}', [], "grounding_invalid_region"),
    ('{"edit_region": [{"id": 0, "label": "hat", "bbox_2d": [10, 20, 10, 400]}]}', [], "grounding_degenerate_box"),
    (json.dumps({"edit_region": [{"id": k, "label": "x", "bbox_2d": [0, 0, 9, 9]} for k in range(17)]}), [],
     "too_many_regions"),
])
def test_parse_grounding(answer, regions, reason):
    from modeling_miescore.data.spatialreward_pipeline.grounding import parse_grounding

    found, outcome = parse_grounding(answer)
    assert found == regions and outcome.reason == reason


@pytest.mark.parametrize("answer,refined,reason", [
    ("check_result: true\nThe <|bbox_0|>hat is red. <|global|> The rest is kept.", "The <|bbox_0|>hat is red. "
     "<|global|> The rest is kept.", None),
    ("```\n**check_result**: `true`\n\"The <|bbox_0|>hat is red. <|global|> The rest is kept.\"\n```",
     "The <|bbox_0|>hat is red. <|global|> The rest is kept.", None),
    ("<think>check_result: false?</think>check_result: true\nThe <|bbox_0|>hat is red. <|global|> The rest is kept.",
     "The <|bbox_0|>hat is red. <|global|> The rest is kept.", None),
    ("check_result: false", None, "hallucination"),
    ("check_result: true\n[Refined Reasoning Text Here]", None, "alignment_empty"),
    ("The reasoning looks right to me.", None, "alignment_unparsable"),
    ("check_result: true\nSomething else entirely was described here instead.", None, "rewrite_drift"),
])
def test_parse_alignment(answer, refined, reason):
    text, outcome = parse_alignment(answer, "The hat is red. The rest is kept.")
    assert text == refined and outcome.reason == reason


@pytest.mark.parametrize("answer,reason", [
    ('{"reasoning": "Good edit.", "score": [20, 18]}', None),
    ('{"reasoning": "Good edit.", "score": [31, 18]}', "sc_score_not_clean"),  # would be clamped
    ('{"reasoning": "Good edit.", "score": ["7/10", 18]}', "sc_score_not_clean"),  # another scale
    ('{"reasoning": "Good" "score": [20, 18]', "sc_score_not_clean"),  # broken JSON: fallback scores
    ('{"reasoning": "Good edit."}', "sc_unparsable"),
    ('{"reasoning": "", "score": [20, 18]}', "sc_no_reasoning"),
])
def test_parse_annotation_keeps_only_clean_scores(answer, reason):
    scores, _, outcome = parse_annotation(answer, "sc", 1)
    assert outcome.reason == reason and (scores == (20.0, 18.0)) == (reason is None)


# ------------------------------------------------------------------------------------------------ end to end

JUDGES = {"grounder": "qwen-ground", "face": "gemini-face", "object": "gpt-object", "pq": "gpt-pq"}
PQ_REFUSED_WIDTH = 37  # the PQ judge refuses edited images of this width


def _server_answer(body, repeat):
    text = request_text(body)
    if "[rate-limited]" in text and "locate the edited regions" in text and repeat == 0:
        return 429, {"error": {"message": "rate limited"}}, {"Retry-After": "0.1"}, 0
    if "[slow]" in text and "check_result" in text:
        return 200, chat_completion("check_result: false"), None, 1.5
    if "based on image naturalness" in text and request_images(body)[0].width == PQ_REFUSED_WIDTH:
        return 200, chat_completion("", refusal="I can't assess this image."), None, 0
    return 200, chat_completion(scripted_d2_answer(text), 1000, 50), None, 0


CASES = [  # (instruction, number of sources, edited width, extra fields)
    ("Add a red hat to the man", 1, 48, {}),
    ("Replace the vase with a lamp", 1, 48, {"num_regions": 2}),
    ("Place the dog from image 2 beside the table", 2, 48, {}),
    ("Recolour the car [bad-grounding]", 1, 48, {}),
    ("Remove the kite [no-edit]", 1, 48, {}),
    ("Make the woman laugh [sc-garbage]", 1, 48, {}),
    ("Make the lamp brighter [sc-clamped]", 1, 48, {}),
    ("Turn the boat green [hallucination]", 1, 48, {}),
    ("Add snow to the roof [drift]", 1, 48, {}),
    ("Change the shirt to blue [no-global]", 1, 48, {"domain": "general"}),
    ("Put a cup on the desk [rate-limited]", 1, PQ_REFUSED_WIDTH, {}),
    ("Add a clock to the wall [slow]", 1, 48, {}),
]


def _write_edits(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (instruction, n_sources, width, extra) in enumerate(CASES):
        sources = []
        for k in range(n_sources):
            Image.new("RGB", (48, 40), (20 + 30 * k, 60, 10 * i)).save(folder / f"s{i}_{k}.png")
            sources.append(f"s{i}_{k}.png")
        Image.new("RGB", (width, 40), (120, 10 * i, 90)).save(folder / f"e{i}.png")
        lines.append(json.dumps({"id": f"edit-{i}", "sources": sources, "edited": f"e{i}.png",
                                 "instruction": instruction, **extra}))
    (folder / "broken.png").write_bytes(b"not an image")
    lines.append(json.dumps({"id": "edit-broken", "sources": ["broken.png"], "edited": "e0.png",
                             "instruction": "Add a hat"}))
    lines.append("{not json")
    path = folder / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_simple_edits(folder: Path, n: int, prefix: str, instruction) -> Path:
    """``n`` one-source edits ``<prefix><i>`` with distinct colours; ``instruction(i)`` is each one's text."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        Image.new("RGB", (40, 32), (10 * i, 90, 30)).save(folder / f"s{i}.png")
        Image.new("RGB", (40, 32), (90, 10 * i, 30)).save(folder / f"e{i}.png")
        lines.append(json.dumps({"id": f"{prefix}{i}", "sources": [f"s{i}.png"], "edited": f"e{i}.png",
                                 "instruction": instruction(i)}))
    path = folder / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _args(server, edits, out, *extra):
    return ["spatialreward-data", "--input", str(edits), "--out", str(out),
            "--grounder", f"{JUDGES['grounder']}@{server.url}", "--face-judge", f"{JUDGES['face']}@{server.url}",
            "--object-judge", f"{JUDGES['object']}@{server.url}", "--pq-judge", f"{JUDGES['pq']}@{server.url}",
            "--timeout", "0.5", "--max-retries", "1", "--concurrency", "4", "--no-progress", *extra]


def _requests_of(server, model):
    return [r["body"] for r in server.requests if r["body"]["model"] == model]


def test_pipeline_end_to_end_report_rows_and_resume(tmp_path, capsys):
    edits = _write_edits(tmp_path / "in")
    out = tmp_path / "out"
    with RoutedChatServer(_server_answer) as server:
        assert main(_args(server, edits, out, "--price", "gpt-object=2,8")) == 1  # [slow] is unfinished
        first = list(server.requests)
    report = json.loads((out / "report.json").read_text())
    sc, pq = report["sc"], report["pq"]
    assert report["samples"] == 12 and report["input_problems"]["count"] == 1  # 12 finished; the bad JSON line
    assert sc["input"]["reasons"] == {"unreadable_image": 1} and pq["input"]["reasons"] == {"unreadable_image": 1}
    assert sc["grounding"]["reasons"] == {"grounding_unparsable": 1}
    assert sc["annotation"]["reasons"] == {"sc_unparsable": 1, "sc_score_not_clean": 1}
    assert sc["alignment"]["reasons"] == {"hallucination": 1, "rewrite_drift": 1}
    assert sc["verification"]["reasons"] == {"missing_global_token": 1}
    assert sc["rows"] == 5 and pq["rows"] == 10 and pq["annotation"]["reasons"] == {"refusal": 1}
    assert sc["grounding"]["examples"]["grounding_unparsable"] == ["edit-3"]

    # routing: human-centric SC requests went to the face judge with crops, the rest to the object judge
    face = _requests_of(server, JUDGES["face"])
    obj = _requests_of(server, JUDGES["object"])
    face_texts = [request_text(b) for b in face]
    assert sorted(json.loads(t.split("Editing instruction: ")[1].split("\n")[0]) for t in face_texts) == \
        ["Add a red hat to the man", "Make the woman laugh [sc-garbage]"]
    assert all("Sequence of Cropped Patches" in t and "Edit region 0" in t for t in face_texts)
    assert len(request_images(face[0])) == 4  # original, edited, before/after crops of the one region
    assert all("Both images contain visual annotations" in request_text(b) for b in obj)
    multi = next(b for b in obj if "dog from image 2" in request_text(b))
    assert len(request_images(multi)) == 3  # two sources and the edited image, each with the boxes drawn
    assert all(request_text(b).startswith("Image 1 (original image") for b in _requests_of(server, JUDGES["grounder"]))

    rows = [json.loads(line) for line in (out / "sft_rows.jsonl").read_text().splitlines()]
    sc_rows = {r["sample_id"]: r for r in rows if r["task"] == "sc"}
    assert set(sc_rows) == {"edit-0", "edit-1", "edit-2", "edit-4", "edit-10"}
    two = sc_rows["edit-1"]  # num_regions 2: two boxes, renumbered from the grounder's 1-based ids
    assert [r["id"] for r in two["regions"]] == [0, 1] and "<|bbox_1|>" in two["reasoning"]
    assert sc_rows["edit-4"]["regions"] == [] and sc_rows["edit-4"]["reasoning"].count("<|global|>") == 1
    assert sc_rows["edit-0"]["route"] == "human" and sc_rows["edit-0"]["annotator"] == JUDGES["face"]
    assert sc_rows["edit-0"]["scores"] == [21.0, 18.5] and Path(sc_rows["edit-0"]["edited"]).is_absolute()
    assert all(check_row(r)[0] is None for r in rows)
    dataset, drops = prepare_sft_dataset(rows)  # what trainers/sft_spatialreward.py does with the file
    assert drops.dropped == 0 and len(dataset) == len(rows)
    target = dataset[0]["messages"][1]["content"][0]["text"]
    assert json.loads(target)["reasoning"] == rows[0]["reasoning"]

    rejections = [json.loads(line) for line in (out / "rejections.jsonl").read_text().splitlines()]
    assert {(r["id"], r["stream"], r["reason"]) for r in rejections} >= {("edit-7", "sc", "hallucination"),
                                                                        ("edit-10", "pq", "refusal")}
    usage = json.loads((out / "usage.jsonl").read_text().splitlines()[-1])["usage"]
    by_stage = {(r["model"], r["stage"]): r for r in usage["by_stage"]}
    assert by_stage[("qwen-ground", "grounding")]["retries"] == 1  # the 429, retried after Retry-After
    assert by_stage[("qwen-ground", "alignment")]["failed_by_kind"] == {"timeout": 1}
    general = by_stage[("gpt-object", "annotation-general")]
    assert general["cost_usd"] == pytest.approx(general["sent"] * (1000 / 1000 * 2 + 50 / 1000 * 8))
    err = capsys.readouterr().err
    assert "skipped edits.jsonl:14" in err and "rerun the same command" in err

    # resume: only the unfinished sample's failed request is sent again; its other answers come from the cache
    with RoutedChatServer(lambda body, repeat: (200, chat_completion(scripted_d2_answer(request_text(body))),
                                                None, 0)) as server:
        assert main(_args(server, edits, out)) == 0
        again = [request_text(r["body"]) for r in server.requests]
    assert len(again) == 1 and "check_result" in again[0] and "[slow]" in again[0]
    report = json.loads((out / "report.json").read_text())
    assert report["samples"] == 13 and report["sc"]["rows"] == 6
    ids = [json.loads(line)["id"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 13 and len(first) > 30


def test_pipeline_kill_and_resume(tmp_path):
    """SIGKILL mid-run: the rerun finishes every sample once and re-sends no request answered before the kill."""
    edits = _write_simple_edits(tmp_path / "in", 8, "k", lambda i: f"Replace the vase number {i} with a lamp")
    out = tmp_path / "out"

    def slow(body, repeat):
        return 200, chat_completion(scripted_d2_answer(request_text(body))), None, 0.15

    with RoutedChatServer(slow) as server:
        args = [*_args(server, edits, out), "--chunk-size", "4", "--concurrency", "2"]
        args[args.index("--timeout") + 1] = "10"
        cached, resent = kill_then_resume(server, args, out / "calls.sqlite", kill_after=14)
    ids = [json.loads(line)["id"] for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(ids) == [f"k{i}" for i in range(8)]  # every sample once
    assert 4 <= cached < 8 * 4 and resent == 8 * 4 - cached  # 4 requests a sample; cached ones not re-sent
    rows = [json.loads(line) for line in (out / "sft_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 16 and all(check_row(r)[0] is None for r in rows)



def test_bad_arguments_exit_2_before_any_request(tmp_path, capsys):
    edits = _write_edits(tmp_path / "in")
    base = ["spatialreward-data", "--input", str(edits), "--face-judge", "f@http://127.0.0.1:9/v1",
            "--object-judge", "o@http://127.0.0.1:9/v1", "--pq-judge", "p@http://127.0.0.1:9/v1", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "o"), "--grounder", "qwen-ground"]) == 2
    assert "--grounder 'qwen-ground' is not MODEL@URL" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main([*base, "--out", str(tmp_path / "file"), "--grounder", "g@http://127.0.0.1:9/v1"]) == 2
    assert "is a file" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("{not json\n")
    base[base.index("--input") + 1] = str(empty)
    assert main([*base, "--out", str(tmp_path / "o"), "--grounder", "g@http://127.0.0.1:9/v1"]) == 2
    assert "holds no usable edit" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_python_api_with_a_local_transformers_model(tmp_path, tiny_qwen3vl_path):
    """run_pipeline from Python, every judge the tiny random Qwen3-VL (one engine): its answers are garbage, so
    every stream ends in a rejection at its first model stage, never in a row."""
    from modeling_miescore.data.spatialreward_pipeline import PipelineJudges, read_edit_records, run_pipeline
    from modeling_miescore.judges.call_cache import CallCache
    from modeling_miescore.judges.call_engine import CallEngine
    from modeling_miescore.judges.chat_backends import TransformersChatBackend

    edits = _write_simple_edits(tmp_path / "in", 3, "t", lambda i: "Add a hat to the man")
    records, problems = read_edit_records(str(edits))
    backend = TransformersChatBackend(str(tiny_qwen3vl_path), device="cpu", dtype="float32", batch_size=3,
                                      max_pixels=64 * 64 * 4)
    with CallCache(tmp_path / "calls.sqlite") as cache:
        engine = CallEngine(backend, cache=cache)
        judges = PipelineJudges(grounder=engine, face=engine, object=engine, pq=engine)
        from modeling_miescore.data.spatialreward_pipeline import PipelineConfig

        run = run_pipeline(records, tmp_path / "out", judges, PipelineConfig(max_tokens=8), progress=False,
                           input_problems=problems)
    assert run.finished == 3 and not run.unfinished and judges.aligner is engine
    assert run.report["sc"]["grounding"]["rejected"] == 3 and run.report["sc"]["rows"] == 0
    assert run.report["pq"]["annotation"]["rejected"] == 3 and run.report["pq"]["rows"] == 0
    assert (tmp_path / "out" / "sft_rows.jsonl").read_text() == ""
    assert set(run.stage_seconds) == {"input", "grounding", "annotation", "alignment"}
    usage = engine.usage.as_dict()["totals"]
    assert usage["sent"] == 6 and usage["completion_tokens"] > 0  # 3 grounding + 3 PQ, batched
