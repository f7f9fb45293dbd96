"""``miescore benchmark gedit`` / ``imgedit`` against a scripted OpenAI-compatible judge on loopback: the numbers
are the hand-computed ones (O per sample, task-type macro means, the intersection subset, ImgEdit type means with
the released rounding and the mean over types), the judge sees what the protocol shows (the text part, then the
source and the edit, the edit resized to the source's size, the user's prompts read without running them) and is
asked as the released scripts ask (GEdit: max_tokens 1400, no temperature, JPEG at full size; ImgEdit: no
max_tokens or temperature, PNG at full size), every failure kind of the scripted
server is flagged or retried, a rerun resumes, and bad input exits 2 without writing a report."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from editor_bench_helpers import (code_of, converted, edit_image, gedit_answer, gedit_args, gedit_server_answer,
                                  imgedit_answer, is_sc, read_report)
from local_http import RoutedChatServer, chat_completion, request_images, request_text

from modeling_miescore.cli.main import main
from modeling_miescore.testing import raw_benchmarks as rb

# GEdit EN rows of the fixture, in order: background_change 0, 1; subject-add 0, 1; text_change 0. Intersection:
# item index even (bg 0, add 0, text 0). Planted (SC scores, PQ scores) per row.
GEDIT_PLAN = [([6, 8], [9, 4]), ([7, 7], [7, 9]), ([10, 3], [8, 8]), ([9, 9], [4, 6]), ([5, 5], [5, 10])]
# ImgEdit rows: add 0, 1, 2; remove 0, 1, 2; compose 0, 1, 2. Planted answers (criteria A, B, C): the third row of
# each type is a flagged answer (out of the scale, conflicting, not a whole number).
IMGEDIT_PLAN = [(5, 4, 4), (3, 3, 2), (4, 6, 5), (4, 4, 4), (1, 2, 2), ("4\nCriterion A: 2", 3, 5), (5, 5, 4),
                (2, 3, 3), ("4.5", 4, 4)]


@pytest.fixture(scope="module")
def gedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gedit")
    dataset, truth = converted("gedit-bench", folder)
    edits = folder / "edits"
    en = [t for t in truth if t["language"] == "en"]
    for code, t in enumerate(en):
        edit_image(edits / "fullset" / t["task_type"] / "en" / f"{t['key']}.png", code)
        edit_image(edits / "fullset" / t["task_type"] / "en" / f"{t['key']}_SRCIMG.png", 25)  # skipped
    cn = [t for t in truth if t["language"] == "cn"]
    for code, t in enumerate(cn, start=10):
        edit_image(edits / "fullset" / t["task_type"] / "cn" / f"{t['key']}.png", code)
    return {"dataset": dataset, "edits": edits, "en": en, "cn": cn, "folder": folder}


@pytest.fixture(scope="module")
def imgedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("imgedit")
    dataset, truth = converted("imgedit-bench", folder, per_type=3)
    lines = []
    for code, t in enumerate(truth):
        path = edit_image(folder / "outputs" / f"{t['key']}.png", code, size=(30, 30))
        lines.append(json.dumps({"id": t["key"], "sources": ["ignored.png"], "edited": f"outputs/{path.name}",
                                 "instruction": t["prompt"]}))  # miescore edit's edits.jsonl format
    (folder / "edits.jsonl").write_text("\n".join(lines) + "\n")
    return {"dataset": dataset, "edits": folder / "edits.jsonl", "truth": truth, "folder": folder}


def _gedit_args(gedit, out, url, *extra):
    return gedit_args(gedit, out, url, *extra, bootstrap=20)


def test_gedit_hand_computed_scores_subsets_and_the_users_prompts(gedit, tmp_path, capsys):
    seen = []

    def answer(body, repeat):
        images = request_images(body)
        seen.append((is_sc(body), [im.size for im in images], request_text(body)))
        return gedit_server_answer(dict(enumerate(GEDIT_PLAN)))(body, repeat)

    prompts = rb.write_vie_prompts_module(tmp_path / "vie_prompts.py")
    out = tmp_path / "out"
    with RoutedChatServer(answer) as server:
        assert main(_gedit_args(gedit, out, server.url, "--language", "en", "--prompts", str(prompts),
                                "--no-plots")) == 0
        assert len(server.requests) == 2 * len(gedit["en"])  # one SC and one PQ request per edit
    assert "must never be imported" not in capsys.readouterr().out  # the prompt module was parsed, never run
    sizes = {t["key"]: t["source_size"] for t in gedit["en"]}
    for sc_request, image_sizes, text in seen:
        assert len(set(image_sizes)) == 1 and image_sizes[0] in sizes.values()  # the edit resized to the source
        if sc_request:
            assert text.startswith("PLACEHOLDER CONTEXT") and "PLACEHOLDER RULE" in text
            assert text.split("Editing instruction: ")[1].split("\n")[0] in {t["instruction"] for t in gedit["en"]}
        else:
            assert text.endswith("PLACEHOLDER PQ: naturalness and artifacts, 0-10.") and "instruction" not in text

    o = [math.sqrt(min(sc) * min(pq)) for sc, pq in GEDIT_PLAN]  # O per sample = sqrt(SC * PQ)
    report = read_report(out)
    assert report["comparable"] is True and report["counts"]["missing_edits"] == 0
    per_row = {r["row"]: r for r in report["per_row"]}
    assert [per_row[t["key"]]["o"] for t in gedit["en"]] == pytest.approx(o)
    full, inter = report["results"]["en"]["full"], report["results"]["en"]["intersection"]
    assert full["by_category"]["background_change"]["o"]["value"] == pytest.approx((o[0] + o[1]) / 2)
    assert full["by_category"]["subject-add"]["sc"]["value"] == pytest.approx((3 + 9) / 2)
    assert full["sc"]["value"] == pytest.approx(((6 + 7) / 2 + (3 + 9) / 2 + 5) / 3)  # mean over task types
    assert full["pq"]["value"] == pytest.approx(((4 + 7) / 2 + (8 + 4) / 2 + 5) / 3)
    assert full["o"]["value"] == pytest.approx(((o[0] + o[1]) / 2 + (o[2] + o[3]) / 2 + o[4]) / 3)
    assert full["o"]["ci"] == [None, None]  # 5 rows: too few to resample for an interval (fewer than 10)
    assert inter["n"] == 3 and inter["o"]["value"] == pytest.approx((o[0] + o[2] + o[4]) / 3)
    assert inter["sc"]["value"] == pytest.approx((6 + 3 + 5) / 3)
    md = (out / "report.md").read_text()
    assert "not comparable" not in md and "vie_prompts.py (sha256 " in md
    assert f"| EN | Intersection | 3 | {(6 + 3 + 5) / 3:.2f} |" in md and (out / "report.html").is_file()


def test_gedit_every_judge_failure_kind_is_flagged_or_retried_and_a_rerun_resumes(gedit, tmp_path):
    behaviour = {0: "malformed", 1: "refusal", 2: "rate", 3: "range", 4: "nan", 10: "count", 11: "slow"}

    def answer(body, repeat):
        code, sc = code_of(body), is_sc(body)
        kind = behaviour.get(code, "good")
        good = gedit_answer([8, 8], [6, 6])[0 if sc else 1]
        if kind == "malformed" and sc:
            return 200, chat_completion('{"score": [5, oops], "reasoning": "x"}'), None, 0
        if kind == "refusal" and not sc:
            return 200, chat_completion("", refusal="I cannot judge this image."), None, 0
        if kind == "rate" and repeat == 0:
            return 429, {"error": {"message": "slow down"}}, {"Retry-After": "0.2"}, 0
        if kind == "range" and sc:
            return 200, gedit_answer([11, 5], [1, 1])[0], None, 0
        if kind == "nan" and not sc:
            return 200, chat_completion('{"score": [NaN, 5], "reasoning": "x"}'), None, 0
        if kind == "count" and sc:
            return 200, gedit_answer([5], [1, 1])[0], None, 0
        if kind == "slow" and not sc:
            return 200, good, None, 1.5
        return 200, good, None, 0

    out = tmp_path / "out"
    args = ["--timeout", "0.5", "--max-retries", "1", "--concurrency", "4", "--no-plots"]
    with RoutedChatServer(answer) as server:
        assert main(_gedit_args(gedit, out, server.url, *args)) == 1  # one edit left unjudged (timeouts)
        report = read_report(out)
    en, cn = gedit["en"], gedit["cn"]
    flagged = {f["id"].split("#")[0]: f["issues"] for f in report["flagged"]}
    assert flagged == {en[0]["key"]: ["no_json_object:sc"], en[1]["key"]: ["refusal:gedit-pq"],
                       en[3]["key"]: ["score_out_of_range:sc"], en[4]["key"]: ["score_invalid:pq"],
                       cn[0]["key"]: ["wrong_score_count:1:sc"]}
    assert report["not_judged"] == [f"{cn[1]['key']}#0"] and report["counts"]["not_judged"] == 1
    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()}
    assert records[f"{en[2]['key']}#0"]["o"] == pytest.approx(math.sqrt(8 * 6))  # answered after the 429
    assert records[f"{en[0]['key']}#0"]["o"] is None and "oops" in records[f"{en[0]['key']}#0"]["raw"]["gedit-sc"]
    en_full, cn_full = report["results"]["en"]["full"], report["results"]["cn"]["full"]
    assert en_full["n"] == 1  # only the 429 edit counts; flagged ones are left out
    assert cn_full["n"] == 3 and cn_full["by_category"]["subject-add"]["o"]["value"] == \
        pytest.approx(math.sqrt(8 * 6))  # the languages are reported apart
    # a task type without a usable key: the released mean over task types is NaN, so no number, and the report
    # names the empty task types rather than averaging the others
    assert en_full["o"]["value"] is None and cn_full["o"]["value"] is None
    assert en_full["not_computable"].startswith("no usable key of task type background_change, text_change")
    assert cn_full["not_computable"].startswith("no usable key of task type background_change:")
    assert report["comparable"] is False  # our own prompts (no --prompts): every report says so
    md = (out / "report.md").read_text()
    assert md.count("not comparable with published numbers") >= 2 and "| CN | Full set | 3 | n/c | n/c | n/c |" in md
    assert "EN, full set: not computable: no usable key of task type background_change, text_change" in md
    assert all("Reply with one JSON object only" in request_text(r["body"]) for r in server.requests)
    usage = json.loads((out / "judgements.jsonl.usage.jsonl").read_text().splitlines()[-1])["usage"]["totals"]
    assert usage["failed_by_kind"] == {"refusal": 1, "timeout": 1} and usage["retries"] >= 2

    def healed(body, repeat):
        return 200, gedit_answer([8, 8], [6, 6])[0 if is_sc(body) else 1], None, 0

    with RoutedChatServer(healed) as server:
        assert main(_gedit_args(gedit, out, server.url, *args)) == 0
        assert [code_of(r["body"]) for r in server.requests] == [11]  # only the timed-out PQ request is sent again
    assert read_report(out)["not_judged"] == []


def test_imgedit_user_prompts_released_rounding_type_means_and_strict_parsing(imgedit, tmp_path):
    prompts = rb.write_imgedit_prompts_json(tmp_path / "prompts.json")
    texts = []

    def answer(body, repeat):
        texts.append(request_text(body))
        scores = IMGEDIT_PLAN[code_of(body)]
        return 200, imgedit_answer(scores, names=("Criterion A", "Criterion B", "Criterion C")), None, 0

    out = tmp_path / "out"
    with RoutedChatServer(answer) as server:
        assert main(["benchmark", "imgedit", "--dataset", str(imgedit["dataset"]), "--edits", str(imgedit["edits"]),
                     "--out", str(out), "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1",
                     "--prompts", str(prompts), "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    instructions = {t["prompt"] for t in imgedit["truth"]}
    for text in texts:  # the type's rubric with <edit_prompt> replaced, as basic_bench.py sends it
        assert text.startswith("PLACEHOLDER ") and text.split("Instruction: ")[1].split("\n")[0] in instructions
    report = read_report(out)
    keys = [f"{t['key']}#0" for t in imgedit["truth"]]
    assert report["comparable"] is True and {f["id"]: f["issues"] for f in report["flagged"]} == {
        keys[2]: ["score_out_of_range:Criterion B"], keys[5]: ["conflicting_scores:Criterion A"],
        keys[8]: ["score_invalid:Criterion A"]}
    valid = [IMGEDIT_PLAN[i] for i in (0, 1, 3, 4, 6, 7)]
    image = [round(sum(s) / 3, 2) for s in valid]  # step1_get_avgscore.py: per-image mean, 2 places
    types = {"add": round((image[0] + image[1]) / 2, 2), "remove": round((image[2] + image[3]) / 2, 2),
             "compose": round((image[4] + image[5]) / 2, 2)}  # step2_typescore.py: per-type mean, 2 places
    full = report["results"]["en"]["full"]
    assert {c: v["mean"]["value"] for c, v in full["by_category"].items()} == pytest.approx(types)
    assert types["remove"] == 2.83  # (4 + 1.67) / 2 = 2.835 rounds down in binary floating point, as released
    assert full["mean"]["value"] == pytest.approx(sum(types.values()) / 3)  # the leaderboard's: mean over types
    md = (out / "report.md").read_text()
    assert "as ImgEdit's leaderboard defines it" in md and "our reading" not in md
    assert "published numbers use gpt-4.1" in md and "gpt-4o" not in md
    # --no-rounding: the exact means (the same judgements aggregated again; the records keep the exact mean)
    import pandas as pd

    from modeling_miescore.evaluation.editor_benchmarks import editor_benchmark
    from modeling_miescore.evaluation.editor_benchmarks.scores import summarize

    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()}
    rows = pd.DataFrame(report["per_row"])
    rows["mean"] = [records[f"{row}#0"]["mean"] for row in rows["row"]]
    exact = summarize(rows, dataclasses.replace(editor_benchmark("imgedit"), round_to=None))
    assert exact["by_category"]["remove"]["mean"]["value"] == pytest.approx((4 + 5 / 3) / 2)
    assert exact["mean"]["value"] == pytest.approx(((13 / 3 + 8 / 3) / 2 + (4 + 5 / 3) / 2 + (14 / 3 + 8 / 3) / 2) / 3)


def test_best_of_n_keeps_the_sample_with_the_highest_overall(gedit, tmp_path):
    bg0, bg1 = gedit["en"][0], gedit["en"][1]
    table = {0: ([6, 6], [6, 6]), 1: ([9, 9], [5, 5]), 2: ([2, 9], [9, 9]), 3: ([5, 5], [5, 5])}
    lines = []
    for key, sample, code in ((bg0["key"], 0, 0), (bg0["key"], 1, 1), (bg0["key"], 2, 2), (bg1["key"], 0, 3)):
        path = edit_image(tmp_path / "edits" / f"{key}-{sample}.png", code)
        lines.append(json.dumps({"id": f"{key}#{sample}", "key": key, "sample": sample, "edited": str(path)}))
    (tmp_path / "edits.jsonl").write_text("\n".join(lines) + "\n")  # miescore edit's layout for N > 1 samples
    out = tmp_path / "best"
    with RoutedChatServer(gedit_server_answer(table)) as server:
        assert main(["benchmark", "gedit", "--dataset", str(gedit["dataset"]), "--edits", str(tmp_path / "edits.jsonl"),
                     "--out", str(out), "--backend", "openai", "--base-url", server.url, "--model", "m", "--language",
                     "en", "--category", "background_change", "--best-of-n", "--no-progress", "--bootstrap", "0",
                     "--no-plots"]) == 0
    o = {code: math.sqrt(min(sc) * min(pq)) for code, (sc, pq) in table.items()}
    report = read_report(out)
    rows = {r["row"]: r for r in report["per_row"]}
    assert rows[bg0["key"]]["o"] == pytest.approx(o[1]) and rows[bg0["key"]]["best_sample"] == 1
    assert rows[bg0["key"]]["sc"] == 9 and rows[bg0["key"]]["pq"] == 5  # the best sample's own SC and PQ
    assert report["results"]["en"]["full"]["o"]["value"] == pytest.approx((o[1] + o[3]) / 2)
    assert report["counts"]["edits"] == 4 and report["counts"]["rows_evaluated"] == 2
    # the default: every sample counts, a key's value is the mean over its samples
    from modeling_miescore.evaluation.editor_benchmarks import editor_benchmark
    from modeling_miescore.evaluation.editor_benchmarks.editing_rows import resolve_edits
    from modeling_miescore.evaluation.editor_benchmarks.editing_rows import load_editing_rows, select_rows
    from modeling_miescore.evaluation.editor_benchmarks.judge_run import read_records
    from modeling_miescore.evaluation.editor_benchmarks.scores import row_frame, sample_frame

    benchmark = editor_benchmark("gedit")
    data = load_editing_rows(str(gedit["dataset"]), benchmark)
    selected = select_rows(data, ["en"], ["background_change"])
    samples = sample_frame(selected, resolve_edits(str(tmp_path / "edits.jsonl"), data.frame, selected),
                           read_records(out / "judgements.jsonl"), benchmark, data.flags)
    mean = row_frame(samples, benchmark, "mean").set_index("row")
    assert mean.loc[bg0["key"], "o"] == pytest.approx((o[0] + o[1] + o[2]) / 3) and mean.loc[bg0["key"], "n_samples"] == 3


def _noread_report(out):
    return not (out / "report.json").exists() and not (out / "report.md").exists()


def test_bad_input_exits_2_with_one_line_and_writes_nothing(gedit, imgedit, tmp_path, capsys):
    out = tmp_path / "out"
    base = _gedit_args(gedit, out, "http://127.0.0.1:9/v1")
    cases = [
        (["--language", "de"], "--language de matches no row; the dataset has cn, en"),
        (["--category", "sky_change"], "--category sky_change matches no row; the dataset has background_change"),
        (["--prompts", str(imgedit["dataset"] / "README.md")], "is not VIEScore's prompt module viescore/vie_prompts"),
        (["--prompts", str(rb.write_vie_prompts_module(tmp_path / "p.py", drop="_prompts_0shot_rule_PQ"))],
         "no string _prompts_0shot_rule_PQ"),
        (["--judge", "clip:/x"], "--judge 'clip:/x' is not KIND:CHECKPOINT"),
    ]
    for extra, message in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    unknown = tmp_path / "unknown"
    edit_image(unknown / "0123456789abcdef.png", 1)
    edit_image(unknown / f"{gedit['en'][0]['key']}.png", 1)
    assert main([*base[:base.index("--edits") + 1], str(unknown), *base[base.index("--edits") + 2:]]) == 2
    assert "1 edits name keys the benchmark lacks:" in capsys.readouterr().err and not out.exists()
    wrong = ["benchmark", "imgedit", *base[2:]]
    assert main(wrong) == 2 and "is 'gedit-bench', not 'imgedit-bench'" in capsys.readouterr().err
    prompts = rb.write_imgedit_prompts_json(tmp_path / "prompts.json", types=("add",))
    assert main(["benchmark", "imgedit", "--dataset", str(imgedit["dataset"]), "--edits", str(imgedit["edits"]),
                 "--out", str(out), "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--prompts", str(prompts)]) == 2
    assert "is not ImgEdit's prompts.json" in capsys.readouterr().err and _noread_report(out)


def test_a_key_without_an_edit_is_listed_counted_and_left_out_of_the_means(gedit, tmp_path):
    en = gedit["en"]
    edits = tmp_path / "flat"  # the flat <key>.png layout, the last EN key without an edit
    for code, t in enumerate(en[:-1]):
        edit_image(edits / f"{t['key']}.png", code)
    out = tmp_path / "out"
    with RoutedChatServer(gedit_server_answer(dict(enumerate(GEDIT_PLAN)))) as server:
        args = _gedit_args(gedit, out, server.url, "--language", "en", "--no-plots")
        args[args.index("--edits") + 1] = str(edits)
        assert main(args) == 0  # a missing edit is reported, not a failed run
        assert len(server.requests) == 2 * (len(en) - 1)  # nothing is asked for the key without an edit
    report = read_report(out)
    assert report["missing_edits"] == [en[-1]["key"]] and report["counts"]["missing_edits"] == 1
    o = [math.sqrt(min(sc) * min(pq)) for sc, pq in GEDIT_PLAN]
    full = report["results"]["en"]["full"]  # text_change (the missing key's category) has no edit left
    assert set(full["by_category"]) == {"background_change", "subject-add"}
    assert full["by_category"]["subject-add"]["o"]["value"] == pytest.approx((o[2] + o[3]) / 2)
    # the released mean over task types is NaN without a text_change key: not computable, naming it, not the
    # mean of the other two
    assert full["o"]["value"] is None and "task type text_change" in full["not_computable"]
    md = (out / "report.md").read_text()
    assert "1 keys without an edit" in md and en[-1]["key"] in md.split("Keys without an edit")[1]


@pytest.mark.parametrize("text, scores, issues", [
    ('{"score": [7, 3], "reasoning": "fine"}', [7.0, 3.0], []),
    ('<think>{"score": [1, 1]}</think>```json\n{"score": [8, 9.0], "reasoning": "r"}\n```', [8.0, 9.0], []),
    ('{"score": [8, 7.5], "reasoning": "r"}', None, ["score_not_integer"]),  # the prompts ask for integers
    ('{"result": {"score": [8, 7], "reasoning": "r"}}', None, ["nested_answer"]),  # not the answer object
    ("[6, 7]", None, ["no_json_object"]),  # VIEScore's parser takes a bare list; we do not
    ('{"score": 7}', None, ["score_not_a_list"]),
    ('{"score": [5, "7"]}', None, ["score_invalid"]),
    ('{"score": [true, 5]}', None, ["score_invalid"]),
    ('{"score": [-1, 5]}', None, ["score_out_of_range"]),
    ('{"score": [5, 6, 7]}', None, ["wrong_score_count:3"]),
    ("  ", None, ["empty_answer"]),
])
def test_viescore_answers_give_two_scores_or_a_named_failure(text, scores, issues):
    from modeling_miescore.evaluation.editor_benchmarks.judges import parse_score_list

    assert parse_score_list(text)[:2] == (scores, issues)


@pytest.mark.parametrize("text, criteria, issues", [
    ("Brief reasoning: ok\nPrompt Compliance: 4  \nVisual Naturalness: 3\nPhysical & Detail Coherence: 5",
     {"Prompt Compliance": 4, "Visual Naturalness": 3, "Physical & Detail Coherence": 5}, []),
    ("- **Style Fidelity:** 2\n- **Content Preservation:** 5\n- **Rendering Quality:** 5\nStep 1: 3 objects",
     {"Style Fidelity": 2, "Content Preservation": 5, "Rendering Quality": 5}, []),
    ("A: 4\nB: 4\nC: 4\nD: 4", None, ["extra_scores:4"]),
    ("A: 4\nB: 0\nC: 4", None, ["score_out_of_range:B"]),
    ("A: 4\nA: 4\nB: 3\nC: 2", {"A": 4, "B": 3, "C": 2}, []),  # a repeated line with the same value is harmless
])
def test_imgedit_answers_give_three_criteria_or_a_named_failure(text, criteria, issues):
    from modeling_miescore.evaluation.editor_benchmarks.judges import parse_criteria

    assert parse_criteria(text)[:2] == (criteria, issues)


def test_own_imgedit_rubric_asks_for_its_three_criteria_by_name():
    from modeling_miescore.evaluation.editor_benchmarks.judges import OWN_CRITERIA, OWN_RUBRICS, parse_criteria

    assert set(OWN_RUBRICS) == set(rb.IMGEDIT_PROMPTS_KEYS) and all("<edit_prompt>" in r for r in OWN_RUBRICS.values())
    assert parse_criteria("Prompt Compliance: 4\nEditing Quality: 4\nDetail Preservation: 3", OWN_CRITERIA)[1] == \
        ["missing_score:Instruction Adherence"]


def test_vie_prompts_are_read_as_text_and_code_is_never_run(tmp_path):
    from modeling_miescore.evaluation.editor_benchmarks.judges import read_vie_prompts
    from modeling_miescore.hub.errors import MIEScoreInputError

    path = rb.write_vie_prompts_module(tmp_path / "vie_prompts.py")
    path.write_text("raise SystemExit('ran')\nimport os\nos.remove(__file__)\n" + path.read_text())
    prompts = read_vie_prompts(path)
    assert path.is_file() and prompts.comparable and prompts.label.startswith("vie_prompts.py (sha256 ")
    assert prompts.sc.split("\n")[0].startswith("PLACEHOLDER CONTEXT") and "<instruction>" in prompts.sc
    assert prompts.pq.endswith("PLACEHOLDER PQ: naturalness and artifacts, 0-10.")
    computed = tmp_path / "computed.py"  # a name assigned by code is not a string literal: never evaluated
    computed.write_text(path.read_text().replace('_prompts_0shot_rule_PQ = "', '_prompts_0shot_rule_PQ = str("')
                        .replace('0-10."', '0-10.")'))
    with pytest.raises(MIEScoreInputError, match="no string _prompts_0shot_rule_PQ"):
        read_vie_prompts(computed)


@pytest.mark.slow  # loads and runs the tiny Qwen3-VL (~7 s on 2 shared cores)
def test_local_transformers_vlm_as_the_mllm_judge(gedit, tmp_path, tiny_qwen3vl_path):
    out = tmp_path / "out"
    assert main(["benchmark", "gedit", "--dataset", str(gedit["dataset"]), "--edits", str(gedit["edits"]), "--out",
                 str(out), "--backend", "transformers", "--model", str(tiny_qwen3vl_path), "--max-tokens", "8",
                 "--language", "en", "--category", "subject-add", "--device", "cpu", "--dtype", "float32",
                 "--batch-size", "2", "--no-progress", "--bootstrap", "0", "--no-plots"]) == 0
    records = [json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["judge"] == tiny_qwen3vl_path.name for r in records)
    # random weights answer nonsense: each edit is judged or flagged with its reason, never given a made-up number
    assert all(r["failed"] == (r["o"] is None) and (not r["failed"] or r["issues"]) for r in records)
    usage = json.loads((out / "judgements.jsonl.usage.jsonl").read_text().splitlines()[-1])["usage"]["totals"]
    assert usage["sent"] == 4 and usage["completion_tokens"] > 0


@pytest.mark.slow  # two subprocesses (~15 s on 2 shared cores)
def test_a_killed_run_resumes_without_asking_again(gedit, tmp_path):
    from kill_resume import kill_then_resume

    table = {**dict(enumerate(GEDIT_PLAN)), **{10 + i: ([4, 4], [4, 4]) for i in range(5)}}

    def slow(body, repeat):
        status, answer, headers, _ = gedit_server_answer(table)(body, repeat)
        return status, answer, headers, 0.25

    out = tmp_path / "out"
    with RoutedChatServer(slow) as server:
        args = _gedit_args(gedit, out, server.url, "--concurrency", "2", "--no-plots")
        cached, resent = kill_then_resume(server, args, out / "judgements.jsonl.cache.sqlite", kill_after=6)
    ids = [json.loads(line)["id"] for line in (out / "judgements.jsonl").read_text().splitlines()]
    assert sorted(ids) == sorted(f"{t['key']}#0" for t in gedit["en"] + gedit["cn"])  # every edit judged once
    assert 1 <= cached < 20 and resent == 20 - cached  # answers in the cache were not asked for again
    assert read_report(out)["counts"]["rows_evaluated"] == 10
