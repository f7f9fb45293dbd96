"""MER-Bench annotation (SpatialReward sec. 4.3, A.1): the app's callbacks without a browser, the append-only
store (resume per annotator, a torn last line, five annotators per sample), export to the raw release, the
builder and ``datasets.load_dataset`` of the result."""

from __future__ import annotations

import json

import pytest
from mer_construction_helpers import construction_folder, form_values

from modeling_miescore.cli.main import main
from modeling_miescore.data.builders.mer_bench import build_mer_bench
from modeling_miescore.data.mer_construction import AnnotationSession, AnnotationStore, export_raw_release
from modeling_miescore.hub.errors import MIEScoreInputError


@pytest.fixture
def folder(tmp_path):
    return construction_folder(tmp_path, 2, 2)


def test_session_resumes_per_annotator_and_rejects_incomplete_forms(folder):
    session = AnnotationSession(AnnotationStore(folder))
    first = session.open("A1")
    order = [s.sample_id for s in session.store.samples]
    assert first["sample_id"] == order[0] and len(first["candidates"]) == 6 and first["instruction"]
    values = form_values(6)
    incomplete = list(values)
    incomplete[3 * 2 + 1] = None  # candidate 3, PQ
    view = session.submit("A1", first["sample_id"], incomplete)
    assert view["sample_id"] == order[0] and "Not saved" in view["message"] and "candidate 3: PQ" in view["message"]
    assert not (folder / "annotations.jsonl").exists()
    assert session.submit("A1", order[0], values)["sample_id"] == order[1]
    assert session.submit("A1", order[1], values)["sample_id"] == order[2]
    with open(folder / "annotations.jsonl", "a") as handle:  # a crash in the middle of the next write
        handle.write('{"id": "A1|' + order[2] + '", "annot')
    reopened = AnnotationSession(AnnotationStore(folder))  # the app restarted
    assert reopened.open("A1")["sample_id"] == order[2] and reopened.open("A2")["sample_id"] == order[0]
    assert reopened.submit("A1", order[2], values)["sample_id"] == order[3]
    lines = (folder / "annotations.jsonl").read_text().splitlines()
    assert [json.loads(line)["sample_id"] for line in lines] == order[:3]  # the torn line is gone, nothing lost
    saved = json.loads(lines[0])["ratings"]
    assert saved[f"{order[0]}-c2"] == {"sc": "medium", "pq": "good", "overall": "good"}
    with pytest.raises(MIEScoreInputError, match="already annotated"):
        reopened.store.submit("A1", order[0], saved)
    nobody = reopened.open(" ")
    assert nobody["sample_id"] is None and "enter an annotator id" in nobody["message"]
    assert reopened.submit("", order[3], values)["sample_id"] is None  # an id cleared before submitting


def _annotate_all(folder, annotators=("A1", "A2", "A3", "A4", "A5")):
    session = AnnotationSession(AnnotationStore(folder))
    for k, who in enumerate(annotators):
        view = session.open(who)
        while view["sample_id"] is not None:
            split = 0 if view["sample_id"] == session.store.samples[0].sample_id else None
            view = session.submit(who, view["sample_id"], form_values(len(view["candidates"]), k, split))
        assert "nothing left" in view["message"]
    return session


def test_annotate_export_build_load(folder, tmp_path):
    session = _annotate_all(folder)
    assert session.open("A6")["sample_id"] is None  # every sample has its five annotators
    raw = tmp_path / "raw"
    report = export_raw_release(folder, raw, groups_per_type=3)
    assert report["exported_samples"] == 4 and report["incomplete_samples"] == 0
    assert report["needs_review"] == 1  # the first sample's first candidate: overall votes 2-2-1
    rows = (raw / "annotations.csv").read_text().splitlines()
    assert rows[0] == "annotator_id,candidate_id,overall,sc,pq" and len(rows) == 1 + 4 * 6 * 5
    summary = build_mer_bench(raw, tmp_path / "built", progress=False, groups_per_type=3, seed=0)
    assert {k: v["num_examples"] for k, v in summary.splits.items()} == \
        {f"{k}pair": n for k, n in zip((2, 3, 4), report["groups"].values())}
    assert [len(r["candidate_id"]) for r in summary.needs_review] == [len(session.store.samples[0].sample_id) + 3]

    import datasets

    ds = datasets.load_dataset(str(tmp_path / "built"), cache_dir=str(tmp_path / "hf"))
    assert ds["4pair"].num_rows == 3 and ds["3pair"].num_rows == report["groups"]["3pair"] >= 1
    for row in ds["3pair"]:
        assert row["overall_tiers"] == ["good", "medium", "poor"] and len(row["edited_images"]) == 3
    for row in ds["4pair"]:  # the fourth shares an overall tier and differs in SC / PQ, ranked by them
        assert sorted(row["overall_tiers"], key=["good", "medium", "poor"].index) == row["overall_tiers"]
        assert len(set(row["overall_tiers"])) == 3
    samples = {json.loads(line)["sample_id"]: json.loads(line) for line in (raw / "samples.jsonl").open()}
    assert {s["category"] for s in samples.values()} == {"general", "human_basic", "human_fine"}
    assert ds["2pair"][0]["instruction"] == samples[ds["2pair"][0]["sample_id"]]["instruction"]
    # the operations synthesis asked for go through the export and the build to the pipeline's grounding request
    assert all(2 <= s["num_edits"] <= 5 for s in samples.values())
    assert all(row["num_edits"] == samples[row["sample_id"]]["num_edits"] for row in ds["3pair"])
    from modeling_miescore.data.spatialreward_pipeline import read_edit_records

    records, problems = read_edit_records(str(tmp_path / "built"), None, tmp_path / "work", progress=False)
    by_sample = {cid: row["sample_id"] for split in ds for row in ds[split] for cid in row["candidate_ids"]}
    assert not problems and records
    assert all(r.num_regions == samples[by_sample[r.id]]["num_edits"] for r in records)


def test_export_errors_exit_2_and_write_nothing(folder, tmp_path, capsys):
    out = tmp_path / "raw"
    args = ["mer-bench", "export", "--folder", str(folder), "--out", str(out)]
    assert main(args) == 2 and "has 5 annotators yet" in capsys.readouterr().err and not out.exists()
    _annotate_all(folder, ("A1", "A2", "A3", "A4"))  # four of five: still incomplete
    assert main(args) == 2 and not out.exists()
    _annotate_all(folder, ("A5",))
    assert main(args) == 0 and (out / "samples.jsonl").exists()
    assert main(args) == 2 and "already exists" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".raw")] == []  # no temporary folder left
    assert main(["mer-bench", "export", "--folder", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2
    assert main(["mer-bench", "annotate", "--folder", str(out)]) == 2  # not a construction folder: no app starts
    assert "is not a MER-Bench construction folder" in capsys.readouterr().err


def test_export_out_that_aliases_the_construction_folder_is_refused_and_nothing_moves(folder, tmp_path, capsys):
    """Issue 22.4 for `mer-bench export --overwrite`: an --out that resolves to the construction folder (spelt
    `folder/../folder`, or through a symlink) or contains it is refused with exit 2; the folder keeps every file and
    no temporary folder is left beside it."""
    _annotate_all(folder, ("A1", "A2", "A3", "A4", "A5"))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    link = tmp_path / "link"
    link.symlink_to(folder, target_is_directory=True)
    for out in (folder.parent / ".." / folder.parent.name / folder.name, link, folder.parent):
        code = main(["mer-bench", "export", "--folder", str(folder), "--out", str(out), "--overwrite"])
        err = capsys.readouterr().err
        assert code == 2 and "the construction --folder" in err, err
        assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert [p.name for p in folder.parent.iterdir() if p.name.startswith(".")] == []
