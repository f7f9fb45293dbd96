"""``miescore benchmark editors``: two editors judged on GEdit-Bench and ImgEdit-Bench by a scripted judge, compared
in the SpatialReward paper's Table 3 layout: the per-run cells and Δ are the hand-computed ones, the paired test
is right on a case with a known exact p-value, the pictures of the largest gains and losses are in the page, and
the published rows are the paper's, cell by cell."""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
from pathlib import Path

import numpy as np
import pytest
from corpus.bad_input_comparison import TAMPERED_REPORTS, set_row, tamper_report
from editor_bench_helpers import GEDIT_RUNS, make_editor_runs

from modeling_miescore.cli.main import main
from modeling_miescore.evaluation.editor_benchmarks.editor_comparison import sign_flip_p_value
from modeling_miescore.evaluation.published_results import SPATIALREWARD_TABLE3, table3_delta_check

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_editor_runs(tmp_path_factory.mktemp("editors"))


def _o(code):
    sc, pq = GEDIT_RUNS[code]
    return math.sqrt(min(sc) * min(pq))


def test_table3_cells_deltas_per_category_and_pictures(runs, tmp_path):
    reports, _ = runs
    cmp = tmp_path / "cmp"
    assert main(["benchmark", "editors", "--runs",
                 f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
                 f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}",
                 "--out", str(cmp), "--bootstrap", "50", "--grid-size", "1"]) == 0
    report = json.loads((cmp / "report.json").read_text())
    base_o = ((_o(0) + _o(1)) / 2 + (_o(2) + _o(3)) / 2) / 2  # the mean over task types of the type means
    tuned_o = ((_o(4) + _o(5)) / 2 + (_o(6) + _o(7)) / 2) / 2
    gedit_base, gedit_tuned = report["table3"]["base"]["gedit"], report["table3"]["tuned"]["gedit"]
    assert gedit_base["summary"]["o"]["value"] == pytest.approx(base_o)
    assert gedit_base["summary"]["sc"]["value"] == pytest.approx(((6 + 4) / 2 + (8 + 5) / 2) / 2)
    assert gedit_tuned["summary"]["pq"]["value"] == pytest.approx(((8 + 4) / 2 + (8 + 6) / 2) / 2)
    assert gedit_tuned["delta"]["value"] == pytest.approx(tuned_o - base_o) and gedit_tuned["delta"]["n_paired"] == 4
    # 4 paired rows: too few to resample for an interval (fewer than 10); the sign-flip p-value is still there
    assert gedit_tuned["delta"]["delta_paired"] == {"value": pytest.approx(tuned_o - base_o), "ci": [None, None]}
    assert 0 < gedit_tuned["delta"]["p_value"] <= 1
    img = report["table3"]["tuned"]["imgedit"]
    assert report["table3"]["base"]["imgedit"]["summary"]["mean"]["value"] == pytest.approx(((3 + 2) / 2 + (4 + 1) / 2) / 2)
    assert img["delta"]["value"] == pytest.approx(((4 + 1) / 2 + (5 + 3) / 2) / 2 - ((3 + 2) / 2 + (4 + 1) / 2) / 2)
    assert report["per_category"]["imgedit"]["tuned"] == pytest.approx({"add": 2.5, "remove": 4.0})
    # the pictures: the largest gain and the largest loss of each benchmark
    gains = {kind: [(c["kind"], c["delta"]) for c in report["cases"][kind]["tuned"]] for kind in ("gedit", "imgedit")}
    deltas = [_o(4 + i) - _o(i) for i in range(4)]
    assert gains["gedit"] == [("gain", pytest.approx(max(deltas))), ("loss", pytest.approx(min(deltas)))]
    assert gains["imgedit"] == [("gain", pytest.approx(2.0)), ("loss", pytest.approx(-1.0))]  # remove 1, add 1
    md = (cmp / "report.md").read_text()
    assert "| w/ Ours | 7.64 | 8.01 | 7.32 | +0.90 | 3.72 | +0.28 |" in md  # the paper's rows stand above ours
    assert f"| tuned † | {((8 + 4) / 2 + (8 + 6) / 2) / 2:.2f} |" in md and "Own prompts — not comparable" in md
    page = (cmp / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 4 + 2  # 4 pictures, 2 per-category plots
    assert all((cmp / c["picture"]).is_file() for k in report["cases"].values() for c in k["tuned"])


def test_bad_runs_exit_2(runs, tmp_path, capsys):
    reports, folder = runs
    for args, message in ((["base"], "is not NAME=DIR[,DIR]"),
                          ([f"base={reports[('gedit', 'base')]}"], "needs at least two runs"),
                          ([f"a={folder}", f"b={reports[('gedit', 'base')]}"], "has no readable report.json"),
                          ([f"a={reports[('gedit', 'base')]},{reports[('gedit', 'tuned')]}",
                            f"b={reports[('gedit', 'base')]}"], "two gedit reports")):
        assert main(["benchmark", "editors", "--runs", *args, "--out", str(tmp_path / "x")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_sign_flip_test_matches_the_exact_permutation_distribution():
    # four keys in two categories, every difference +1: |macro mean| reaches the observed 1 only when all four
    # signs agree, so the exact two-sided p is 2 / 16
    codes = np.array([0, 0, 1, 1])
    assert sign_flip_p_value(codes, np.ones(4), permutations=20000, seed=1) == pytest.approx(2 / 16, abs=0.01)
    # opposite differences of equal size: the observed statistic is 0 and every permutation reaches it
    assert sign_flip_p_value(codes, np.array([1.0, -1.0, 2.0, -2.0]), permutations=999) == 1.0


def test_published_table3_is_the_papers_cell_by_cell():
    fixture = Path(__file__).parents[2] / "fixtures" / "spatialreward_table3.txt"
    parsed, group = {}, None
    for line in fixture.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0][:2] in ("1.", "2.", "3."):
            group = cells[0]
        elif line.startswith("| ") and group and (cells[0] == "Baseline" or cells[0].startswith("w/")):
            parsed.setdefault(group, {})[cells[0]] = [None if c == "-" else float(c) for c in cells[1:7]]
    ours = {g: {n: list(r.values()) for n, r in rows.items()} for g, rows in SPATIALREWARD_TABLE3.items()}
    assert ours == parsed and sum(len(rows) for rows in parsed.values()) == 8
    assert all(check["agrees"] for check in table3_delta_check().values())  # each Δ = Ovrl. - the group's baseline


# ------------------------------------------------------------------------------ hostile outputs and reports


def _args(reports, out, *extra) -> list:
    return ["benchmark", "editors", "--runs", f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
            f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}", "--out", str(out),
            "--bootstrap", "0", "--no-progress", *extra]


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def own_runs(runs, tmp_path):
    """A copy of the four report folders, free to tamper with: ``({(benchmark, run): folder}, their parent)``."""
    reports, _ = runs
    copied = {key: tmp_path / "runs" / folder.name for key, folder in reports.items()}
    for key, folder in reports.items():
        shutil.copytree(folder, copied[key])
    return copied, tmp_path / "runs"


def _one_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and needle in err, err
    return err


@pytest.mark.parametrize("where", ["same", "dotdot", "link", "second run", "inside", "containing"])
def test_out_that_is_inside_or_contains_a_run_is_refused_and_every_input_intact(where, own_runs, tmp_path, capsys):
    reports, parent = own_runs
    base = reports[("gedit", "base")]
    out = {"same": base, "dotdot": base / ".." / base.name, "link": tmp_path / "link",
           "second run": reports[("imgedit", "tuned")], "inside": base / "cmp", "containing": parent}[where]
    if where == "link":
        out.symlink_to(base)
    before = _files(parent)
    assert main(_args(reports, out)) == 2
    _one_line(capsys, "choose an output folder outside --runs")
    assert _files(parent) == before and not (base / "cmp").exists()


@pytest.mark.parametrize("case", list(TAMPERED_REPORTS))
def test_a_tampered_report_is_one_line_naming_the_run_and_row(case, own_runs, tmp_path, capsys):
    reports, _ = own_runs
    change, needle = TAMPERED_REPORTS[case]
    tamper_report(reports[("gedit", "tuned")], change)
    assert main(_args(reports, tmp_path / "cmp")) == 2
    err = _one_line(capsys, needle)
    assert "--runs tuned" in err and [p.name for p in tmp_path.iterdir()] == ["runs"]  # no --out, no temporary


def test_an_imgedit_score_off_its_1_to_5_scale_is_refused(own_runs, tmp_path, capsys):
    reports, _ = own_runs
    tamper_report(reports[("imgedit", "base")], set_row(0, mean=0.5))
    assert main(_args(reports, tmp_path / "cmp")) == 2
    assert "--runs base" in _one_line(capsys, "has mean = 0.5, off the 1-5 scale")


def test_level_nan_is_refused(own_runs, tmp_path, capsys):
    reports, _ = own_runs
    with pytest.raises(SystemExit) as exit_:
        main(_args(reports, tmp_path / "cmp", "--level", "nan"))
    assert exit_.value.code == 2 and "expected a finite number, got 'nan'" in capsys.readouterr().err


def test_fifos_in_a_report_folder_or_as_an_edit_never_block(own_runs, tmp_path, capsys):
    """A FIFO as report.json is refused; a report row whose edit is a FIFO gets an 'image not found' panel."""
    reports, _ = own_runs
    os.mkfifo(tmp_path / "edit.png")
    tamper_report(reports[("gedit", "tuned")], lambda r: {**r, "per_row": [{**row, "edited": str(tmp_path / "edit.png")}
                                                                     for row in r["per_row"]]})
    assert main(_args(reports, tmp_path / "cmp", "--grid-size", "1", "--no-plots")) == 0
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert all((tmp_path / "cmp" / c["picture"]).is_file() for c in report["cases"]["gedit"]["tuned"])
    capsys.readouterr()
    folder = reports[("imgedit", "base")]
    (folder / "report.json").unlink()
    os.mkfifo(folder / "report.json")
    assert main(_args(reports, tmp_path / "cmp2")) == 2
    _one_line(capsys, "is not a regular file")


def test_a_full_disk_is_exit_1_and_leaves_the_earlier_comparison(runs, tmp_path, capsys):
    """Files above 200 kB cannot be written (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG):
    the comparison's pictures fit, its report.html does not. The earlier comparison in --out stays as it was."""
    reports, _ = runs
    out = tmp_path / "cmp"
    assert main(_args(reports, out, "--grid-size", "1", "--label", "earlier")) == 0
    before = _files(out)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    capsys.readouterr()
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, hard))
    try:
        status = main(_args(reports, out, "--grid-size", "2"))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert status == 1
    _one_line(capsys, "cannot write the comparison")
    assert _files(out) == before and [p.name for p in tmp_path.iterdir()] == ["cmp"]  # no temporary folder left
