"""The bad-input corpus's ``benchmark editors`` group (issue 41): ``miescore benchmark editors`` comparing two
editors' GEdit and ImgEdit runs (``editor_bench_helpers.make_editor_runs``, made once per corpus and copied for each
case) with ``--out`` a run folder (also spelled ``RUN/../RUN``, through a link, the second run, inside a run, the
runs' parent), a tampered ``report.json`` (:data:`TAMPERED_REPORTS`, shared with
``tests/evaluation/editor_benchmarks/test_editor_comparison.py``), an ImgEdit score off its 1-5 scale, ``--level
nan``, a FIFO as ``report.json``, and a full disk with an earlier comparison in ``--out``.

Clean: exit 2 (1 for the full disk), one line on stderr naming the problem (else *wrong status* / *unclear
message*), every run folder unchanged, no temporary folder and no new ``--out`` left (unless the run exited 0), an
earlier comparison unchanged (else *data lost*), and no file written holding ``/etc/passwd`` or the environment
(else *secrets copied*). The full disk runs in a child process whose files are bounded (RLIMIT_FSIZE); the FIFO is
released after the timeout.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path

from editor_bench_helpers import make_editor_runs

from .bad_input_corpus import Case, Outcome, check_message, run_cli
from .bad_input_editor_benchmarks import fresh_case_folder
from .bad_input_editor_runs import in_child
from .bad_input_export import changed_apart_from, files_holding_secrets, folder_state

__all__ = ["EDITORS_ENTRY", "TAMPERED_REPORTS", "comparison_cases", "set_row", "tamper_report"]

EDITORS_ENTRY = "benchmark editors"
FULL_DISK_FILE_SIZE = 200_000  # bytes: the comparison's pictures fit, its report.html does not


def tamper_report(folder: Path, change) -> None:
    """``folder/report.json`` rewritten as ``change(report)``."""
    path = folder / "report.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def set_row(index: int, **values):
    """A change setting ``values`` in the report's ``per_row[index]`` (``"DROP"``: the key removed)."""
    def change(report):
        report["per_row"][index].update(values)
        report["per_row"][index] = {k: v for k, v in report["per_row"][index].items() if v != "DROP"}
        return report
    return change


# name -> (change of the tuned GEdit run's report.json, what the one line says)
TAMPERED_REPORTS = {
    "a list": (lambda r: [r], "is a JSON list, not a report"),
    "no category": (set_row(0, category="DROP"), "has no category"),
    "no language": (set_row(1, language="DROP"), "has no language"),
    "no row": (set_row(2, row="DROP"), "has no row"),
    "a string overall": (set_row(0, o="7.5"), 'has o = "7.5", not a finite number'),
    "a bool overall": (set_row(0, o=True), "has o = true, not a finite number"),
    "an overall of 1e300": (set_row(0, o=1e300), "has o = 1e+300, off the 0-10 scale"),
    "a negative score": (set_row(0, sc=-3), "has sc = -3, off the 0-10 scale"),
    "a duplicated row": (lambda r: {**r, "per_row": r["per_row"] + r["per_row"]}, "lists a key listed before"),
    "a source out of its folder": (set_row(0, sources=["/etc/passwd"]), "sources that are not paths inside"),
    "a selection without views": (lambda r: {**r, "selection": {"selector": "x"}}, "has no selector or not"),
    "per_row not a list": (lambda r: {**r, "per_row": {"a": 1}}, "not a report of 'miescore benchmark gedit'"),
    "a category the report does not list": (set_row(0, category="sky"), "category 'sky', which its report's"),
    "categories a string": (lambda r: {**r, "categories": "abc"}, "of the wrong type"),
    "a number as label": (lambda r: {**r, "label": 3}, "of the wrong type"),
}


def _runs(corpus, folder: Path) -> dict:
    """A copy in ``folder/runs`` of the four report folders ``{(benchmark, run): folder}``, made once per corpus."""
    made = corpus.folder / "benchmark-editors-runs"
    if not (made / "done").is_file():
        shutil.rmtree(made, ignore_errors=True)
        reports, _ = make_editor_runs(made)
        (made / "done").write_text(json.dumps({f"{b}/{r}": str(p.relative_to(made)) for (b, r), p in reports.items()}))
    listed = json.loads((made / "done").read_text())
    return {tuple(key.split("/")): Path(shutil.copytree(made / rel, folder / "runs" / Path(rel).name))
            for key, rel in listed.items()}


def _argv(reports: dict, out: Path, *extra) -> list:
    return ["benchmark", "editors", "--runs", f"base={reports[('gedit', 'base')]},{reports[('imgedit', 'base')]}",
            f"tuned={reports[('gedit', 'tuned')]},{reports[('imgedit', 'tuned')]}", "--out", out, "--bootstrap", "0",
            "--no-progress", *extra]


def _compare(prepare, needle: str, corpus, outcome: Outcome, *, expect: int = 2, child: int = 0) -> None:
    """``prepare(corpus, reports, folder)`` damages a copy of the runs and returns ``(out, extra arguments)``; the
    comparison is run (in a child with files bounded to ``child`` bytes when ``child``) and judged."""
    folder = fresh_case_folder(corpus, outcome.case, "benchmark-editors")
    reports = _runs(corpus, folder)
    out, extra = prepare(corpus, reports, folder)
    before = folder_state(folder)
    argv = _argv(reports, out, *extra)
    if child:
        (status, err), stdout = in_child(argv, main="modeling_miescore.cli.main:main", file_size=child), ""
        outcome.flag("traceback", "Traceback (most recent call last)" in err)
    else:
        status, stdout, err = run_cli(argv, outcome)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    outcome.expected, outcome.got = f"exit {expect}, one line, the runs unchanged", f"exit {status}"
    outcome.message = " | ".join(lines)[-300:]
    outcome.flag("wrong_status", status != expect)
    outcome.flag("unclear_message", len(lines) != 1)
    check_message(outcome, err, needle)
    # the runs and an earlier comparison unchanged; no temporary folder; no new --out unless the run exited 0
    written = "cmp" if status == 0 and "cmp" not in before else None
    outcome.flag("data_lost", changed_apart_from(before, folder_state(folder), written))
    written = [name for name in files_holding_secrets(folder) if name not in before]
    outcome.flag("secrets_copied", bool(written))


# ----------------------------------------------------------------------------------------------- the damages


def _out_alias(where: str, corpus, reports: dict, folder: Path) -> tuple:
    base = reports[("gedit", "base")]
    if where == "a link to a run":
        (folder / "link").symlink_to(base)
    return {"a run folder": base, "RUN/../RUN": base / ".." / base.name, "a link to a run": folder / "link",
            "the second run": reports[("imgedit", "tuned")], "inside a run": base / "cmp",
            "the runs' parent": folder / "runs"}[where], ()


def _tampered(change, benchmark: str, run: str, corpus, reports: dict, folder: Path) -> tuple:
    tamper_report(reports[(benchmark, run)], change)
    return folder / "cmp", ()


def _level_nan(corpus, reports: dict, folder: Path) -> tuple:
    return folder / "cmp", ("--level", "nan")


def _fifo_report(corpus, reports: dict, folder: Path) -> tuple:
    path = reports[("imgedit", "base")] / "report.json"
    path.unlink()
    os.mkfifo(path)
    corpus.fifos.append(path)  # released by the corpus if the comparison blocks on it
    return folder / "cmp", ()


def _earlier_comparison(corpus, reports: dict, folder: Path) -> tuple:
    status = run_cli(_argv(reports, folder / "cmp", "--grid-size", "1", "--label", "earlier"),
                     Outcome("", "", ""))[0]
    if status != 0:
        raise RuntimeError(f"the earlier comparison failed (exit {status})")
    return folder / "cmp", ("--grid-size", "2")


_ALIAS = "choose an output folder outside --runs"


def comparison_cases() -> list:
    """The ``benchmark editors`` cases (module docstring)."""
    cases = [Case(EDITORS_ENTRY, f"--out = {where}", "41.editors", partial(_compare, partial(_out_alias, where),
                                                                            _ALIAS))
             for where in ("a run folder", "RUN/../RUN", "a link to a run", "the second run", "inside a run",
                           "the runs' parent")]
    cases += [Case(EDITORS_ENTRY, f"report.json: {name}", "41.editors",
                   partial(_compare, partial(_tampered, change, "gedit", "tuned"), needle))
              for name, (change, needle) in TAMPERED_REPORTS.items()]
    return cases + [
        Case(EDITORS_ENTRY, "an ImgEdit mean of 0.5", "41.editors",
             partial(_compare, partial(_tampered, set_row(0, mean=0.5), "imgedit", "base"), "off the 1-5 scale")),
        Case(EDITORS_ENTRY, "--level nan", "41.editors", partial(_compare, _level_nan, "expected a finite number")),
        Case(EDITORS_ENTRY, "a FIFO as report.json", "41.editors",
             partial(_compare, _fifo_report, "is not a regular file")),
        Case(EDITORS_ENTRY, "a full disk, an earlier comparison in --out", "41.editors",
             partial(_compare, _earlier_comparison, "cannot write the comparison", expect=1,
                     child=FULL_DISK_FILE_SIZE)),
    ]
