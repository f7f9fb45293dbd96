"""Numbers that reproduce: every editor-benchmark report carries ``protocol`` with a fingerprint of the settings
that decide its numbers (the same for the same inputs and settings, another for any changed setting, one test per
setting group), which heads report.md / report.html with the settings that differ from the released protocol;
``benchmark editors`` refuses runs of unlike protocols (exit 2, each difference listed) unless
``--allow-protocol-differences`` (then every table says so); ``benchmark rescore`` recomputes every number from the
judgements on disk and finds each one edited by hand; ``--recheck N`` reports zero drift against a judge that
answers as before and the exact drift against one that changed its answers. All against a scripted judge on
loopback (``editor_bench_helpers``)."""

from __future__ import annotations

import json
import math

import pytest
from editor_bench_helpers import (GEDIT_RUNS, code_of, converted, edit_image, gedit_answer, gedit_args,
                                  gedit_server_answer, is_sc, make_editor_runs, read_report)
from local_http import RoutedChatServer

from modeling_miescore.cli.main import main
from modeling_miescore.evaluation.protocol import canonical, differences, fingerprint, make_protocol
from modeling_miescore.testing import raw_benchmarks as rb

# GEdit EN rows of the fixture: background_change 0, 1; subject-add 0, 1; one edit per row with codes 0-3
TABLE = {code: GEDIT_RUNS[code] for code in range(4)}


@pytest.fixture(scope="module")
def gedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gedit")
    dataset, truth = converted("gedit-bench", folder, tasks={"background_change": 2, "subject-add": 2},
                               languages=("en",))
    for code, t in enumerate(truth):
        edit_image(folder / "edits" / f"{t['key']}.png", code)
    prompts = rb.write_vie_prompts_module(folder / "vie_prompts.py")
    return {"dataset": dataset, "edits": folder / "edits", "folder": folder, "prompts": prompts}


@pytest.fixture(scope="module")
def server():
    with RoutedChatServer(gedit_server_answer(TABLE)) as running:
        yield running


@pytest.fixture(scope="module")
def base_run(gedit, server, tmp_path_factory):
    out = tmp_path_factory.mktemp("base") / "out"
    assert main(gedit_args(gedit, out, server.url, "--no-plots")) == 0
    return out


def _protocol(out):
    return read_report(out)["protocol"]


def test_same_inputs_give_the_same_fingerprint_and_the_report_is_headed_by_it(gedit, server, base_run, tmp_path):
    again = tmp_path / "again"  # another folder, another day: the same settings
    assert main(gedit_args(gedit, again, server.url, "--no-plots")) == 0
    first, second = _protocol(base_run), _protocol(again)
    assert first["fingerprint"] == second["fingerprint"] == fingerprint(first)
    assert len(first["fingerprint"]) == 64 and first["kind"] == "gedit"
    assert first["dataset"]["keys"] == 4 and first["dataset"]["data_sha256"] and first["request"]["max_tokens"] == 1400
    # the judge is named "gpt-4.1" as published, but our own prompts are used: the header says so
    assert first["differs_from_released"] == ["prompts.source: own prompts (released: the benchmark's own (the "
                                              "user's copy))"]
    for page, run_heading in (("report.md", "## Run"), ("report.html", ">Run</h2>")):
        text = (base_run / page).read_text()
        assert first["fingerprint"] in text and "Differs from the released protocol" in text
        assert text.index(first["fingerprint"]) < text.index(run_heading)  # at the head of the report
    assert "127.0.0.1" not in canonical(first)  # the endpoint (where credentials live) is not a setting


# one changed setting per case, by group: each must change the fingerprint and be named by differences()
SETTING_CHANGES = {
    "judge model": (["--model", "gpt-4o"], "judge.mllm.model"),
    "judge temperature": (["--temperature", "0"], "judge.mllm.sampling.temperature"),
    "judge seed": (["--judge-seed", "7"], "judge.mllm.sampling.seed"),
    "request max tokens": (["--max-tokens", "300"], "request.max_tokens"),
    "request image format": (["--image-format", "PNG"], "request.image_format"),
    "request image size": (["--max-pixels", "1024"], "request.max_pixels"),
    "request message order": (["--parts-order", "images-first"], "request.parts_order"),
    "prompts": (["--prompts", "PROMPTS"], "prompts.source"),
    "aggregation per key": (["--best-of-n"], "aggregation.per_key"),
    "aggregation bootstrap": (["--bootstrap", "50"], "aggregation.bootstrap.n"),
    "dataset selection": (["--category", "subject-add"], "dataset.keys"),
}


@pytest.mark.parametrize("case", list(SETTING_CHANGES))
def test_a_changed_setting_changes_the_fingerprint(case, gedit, server, base_run, tmp_path):
    extra, setting = SETTING_CHANGES[case]
    extra = [str(gedit["prompts"]) if x == "PROMPTS" else x for x in extra]
    args = gedit_args(gedit, tmp_path / "out", server.url, "--no-plots")
    if "--bootstrap" in extra:
        args = args[:args.index("--bootstrap")] + args[args.index("--bootstrap") + 2:]
    assert main(args + extra) == 0
    changed, base = _protocol(tmp_path / "out"), _protocol(base_run)
    assert changed["fingerprint"] != base["fingerprint"]
    assert any(line.startswith(setting + ":") for line in differences(changed, base)), differences(changed, base)


def test_credentials_are_never_part_of_a_protocol():
    settings = {"runs": [], "comparison": {"api_key": "sk-1"}, "package": {}}
    with pytest.raises(ValueError, match="credential"):
        make_protocol("editors", settings)
    with pytest.raises(ValueError, match="records runs, comparison, package"):
        make_protocol("editors", {"runs": []})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_editor_runs(tmp_path_factory.mktemp("runs"))


def _other_judge_run(reports, folder):
    """The tuned editor's GEdit edits judged by another model name: an unlike protocol."""
    out = folder / "report-gedit-tuned-other-judge"
    if not out.exists():
        dataset = folder / "gedit-bench"
        with RoutedChatServer(gedit_server_answer(GEDIT_RUNS)) as server:
            assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(folder / "gedit-tuned"),
                         "--out", str(out), "--backend", "openai", "--base-url", server.url, "--model", "m2",
                         "--no-progress", "--bootstrap", "0", "--no-plots", "--max-tokens", "500"]) == 0
    return out


def test_editors_refuses_unlike_protocols_unless_allowed_and_then_every_table_says_so(runs, tmp_path, capsys):
    reports, folder = runs
    other = _other_judge_run(reports, folder)
    args = ["benchmark", "editors", "--runs", f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
            f"tuned={other},{reports[('imgedit', 'tuned')]}", "--bootstrap", "0", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert "different protocols" in err and "tuned gedit: judge.mllm.model: m2 (base gedit: m)" in err
    assert "request.max_tokens: 500 (base gedit: 1400)" in err and "--allow-protocol-differences" in err
    assert "imgedit" not in err.split("different protocols")[1].split("--allow")[0].replace("base gedit", "")
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "allowed"
    assert main([*args, "--out", str(out), "--allow-protocol-differences"]) == 0
    report = read_report(out)
    assert report["protocol"]["comparison"]["allowed_differences"] == {"tuned gedit": [
        "judge.mllm.model: m2 (base gedit: m)", "judge.mllm.name: m2 (base gedit: m)",
        "request.max_tokens: 500 (base gedit: 1400)"]}
    md = (out / "report.md").read_text()
    tables = sum(1 for line in md.splitlines() if line.startswith("## Table 3") or
                 (line.startswith("## ") and " per " in line))  # Table 3 and the per-category tables
    assert tables == 3 and md.count("**Runs of different protocols**") == tables
    assert "Compared despite protocol differences" in md


def test_like_runs_compare_and_the_comparison_carries_a_fingerprint(runs, tmp_path):
    reports, _ = runs
    outs = []
    for name in ("a", "b"):
        outs.append(tmp_path / name)
        assert main(["benchmark", "editors", "--runs",
                     f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
                     f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}", "--bootstrap", "0",
                     "--out", str(outs[-1]), "--no-progress", "--no-plots"]) == 0
    first, second = (read_report(o)["protocol"] for o in outs)
    assert first["fingerprint"] == second["fingerprint"] and first["kind"] == "editors"
    assert "**Runs of different protocols**" not in (outs[0] / "report.md").read_text()


def test_rescore_reproduces_every_number_and_finds_an_edited_one(runs, tmp_path, capsys):
    reports, _ = runs
    cmp = tmp_path / "cmp"
    assert main(["benchmark", "editors", "--runs", f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
                 f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}", "--bootstrap", "50",
                 "--out", str(cmp), "--no-progress", "--no-plots"]) == 0
    for folder in [*reports.values(), cmp]:
        capsys.readouterr()
        assert main(["benchmark", "rescore", str(folder)]) == 0
        err = capsys.readouterr().err
        assert "match bit for bit" in err and int(err.split("all ")[1].split(" ")[0]) >= 10
    # a number changed in the last bit is found, and so is a protocol setting changed without its fingerprint
    report = read_report(cmp)
    value = report["table3"]["tuned"]["gedit"]["summary"]["o"]["value"]
    report["table3"]["tuned"]["gedit"]["summary"]["o"]["value"] = math.nextafter(value, math.inf)
    report["protocol"]["comparison"]["by"] = "miescore"
    (cmp / "report.json").write_text(json.dumps(report))
    capsys.readouterr()
    assert main(["benchmark", "rescore", str(cmp)]) == 1
    err = capsys.readouterr().err
    assert f"differs: table3.tuned.gedit.summary.o.value: report {math.nextafter(value, math.inf)!r}, recomputed " \
           f"{value!r}" in err and "differs: protocol.fingerprint" in err and "2 of " in err


def test_rescore_bad_input_exits_2(runs, tmp_path, capsys):
    assert main(["benchmark", "rescore", str(tmp_path)]) == 2
    assert "has no readable report.json" in capsys.readouterr().err
    (tmp_path / "report.json").write_text(json.dumps({"benchmark": "mie-bench", "results": {}}))
    assert main(["benchmark", "rescore", str(tmp_path)]) == 2
    assert "records no protocol and inputs" in capsys.readouterr().err


def _drifting(step: int):
    """A judge that answers as TABLE the first time it sees a request and, asked the same again, raises every SC
    score by ``step`` (0: answers as before)."""
    def answer(body, repeat):
        sc, pq = TABLE[code_of(body)]
        sc = [min(10, s + step * (repeat > 0)) for s in sc]
        first, second = gedit_answer(sc, pq)
        return 200, first if is_sc(body) else second, None, 0

    return answer


def _o(sc, pq):
    return math.sqrt(min(sc) * min(pq))


@pytest.mark.parametrize("step", [0, 2])
def test_recheck_reports_the_judges_drift(step, gedit, tmp_path, capsys):
    out = tmp_path / "out"
    with RoutedChatServer(_drifting(step)) as server:
        assert main(gedit_args(gedit, out, server.url, "--no-plots")) == 0
        before = (out / "judgements.jsonl").read_text()
        # months later: the same command with --recheck; the answer cache holds every answer, the re-check skips it
        assert main(gedit_args(gedit, out, server.url, "--no-plots", "--recheck", "4")) == 0
        again = read_report(out)["recheck"]
        assert main(gedit_args(gedit, out, server.url, "--no-plots", "--recheck", "2")) == 0
        two = read_report(out)["recheck"]
        assert main(gedit_args(gedit, out, server.url, "--no-plots", "--recheck", "2")) == 0
    assert (out / "judgements.jsonl").read_text() == before  # the judgements on disk are never changed
    assert again["rechecked"] == again["compared"] == 4 and again["flagged"] == []
    sc_changes = [min(10, min(sc) + step) - min(sc) for sc, _ in TABLE.values()]
    o_changes = [_o([min(10, s + step) for s in sc], pq) - _o(sc, pq) for sc, pq in TABLE.values()]
    assert again["drift"]["sc"]["mean_change"]["value"] == pytest.approx(sum(sc_changes) / 4)
    assert again["drift"]["pq"] == {"mean_change": {"value": 0.0, "ci": [None, None]}, "largest_change": 0.0}
    assert again["drift"]["o"]["largest_change"] == pytest.approx(max(o_changes, key=abs))
    assert len(again["changed"]) == sum(c != 0 for c in sc_changes)
    assert read_report(out)["recheck"]["changed"] == two["changed"]  # the same N and seed draw the same edits
    assert two["rechecked"] == 2
    if step:
        assert "Judge drift (--recheck 2)" in (out / "report.md").read_text()
        assert f"{len(two['changed'])} changed" in capsys.readouterr().err
    else:
        assert again["changed"] == [] and "0 changed" in capsys.readouterr().err


def test_recheck_needs_the_mllm_judge(gedit, tmp_path, capsys):
    assert main(["benchmark", "gedit", "--dataset", str(gedit["dataset"]), "--edits", str(gedit["edits"]), "--out",
                 str(tmp_path / "o"), "--judge", "miescore:x", "--recheck", "3"]) == 2
    assert "--recheck configure the MLLM judge" in capsys.readouterr().err


@pytest.mark.slow  # two runs of the offline demo (~1 min each on 2 shared cores)
def test_two_demo_runs_give_equal_fingerprints_and_rescore_reproduces_every_number(tmp_path, capsys):
    for name in ("first", "second"):
        assert main(["benchmark", "editors-demo", "--out", str(tmp_path / name)]) == 0
    for report in ("gedit-base", "imgedit-base", "comparison"):
        first, second = (read_report(tmp_path / name / "reports" / report)["protocol"] for name in ("first", "second"))
        assert first["fingerprint"] == second["fingerprint"], differences(first, second)
        capsys.readouterr()
        assert main(["benchmark", "rescore", str(tmp_path / "first" / "reports" / report)]) == 0
        assert "match bit for bit" in capsys.readouterr().err
    judge = read_report(tmp_path / "first" / "reports" / "gedit-base")["protocol"]["judge"]
    assert judge["mllm"] is None and judge["reward_models"][0]["kind"] == "miescore"
    assert len(judge["reward_models"][0]["weights_sha256"]) == 64  # the tiny checkpoint's weights, not its path


def test_weights_and_data_hashes_read_files_not_paths_and_follow_no_link(tmp_path):
    from modeling_miescore.evaluation.protocol import folder_sha256, weights_sha256

    for name, content in (("a", b"w1"), ("b", b"w1"), ("c", b"w2")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(content)
        (tmp_path / name / "config.json").write_text(name)  # not weights: not hashed
    assert weights_sha256(tmp_path / "a") == weights_sha256(tmp_path / "b") != weights_sha256(tmp_path / "c")
    (tmp_path / "a" / "extra.safetensors").symlink_to(tmp_path / "c" / "model.safetensors")
    assert weights_sha256(tmp_path / "a") == weights_sha256(tmp_path / "b")  # a link out is never followed
    assert weights_sha256("org/hub-model") is None and folder_sha256(tmp_path / "a", (".parquet",)) is None
