"""MIE-Bench splits: exactly 3:1:1 within each task by default, the instance-id hash as an option (unchanged),
and split files (CSV or JSON) honoured and checked with file and line."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import pytest

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders.base import BuildUsageError
from modeling_miescore.data.builders.mie_bench import build_mie_bench
from modeling_miescore.data.builders.mie_bench_split import split_of
from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.data.schema import MIE_SPLITS, TASKS
from tiny_mie_raw import instance_ids, tiny_mie_raw

# 1 to 15 instances, then 23: every remainder of n / 5, ties between validation and test included.
SIZES = dict(zip(TASKS, [*range(1, 16), 23]))
SMALL = dict(zip(TASKS[:6], [1, 2, 3, 4, 7, 9]))


def split_map(out: Path) -> dict[str, str]:
    """``{instance_id: split}`` read back from the Parquet shards; fails if an instance is in two splits."""
    import pyarrow.parquet as pq

    found: dict[str, str] = {}
    for f in sorted((out / "data").glob("*.parquet")):
        split = f.name.split("-")[0]
        for iid in pq.read_table(f, columns=["instance_id"]).column(0).to_pylist():
            assert found.setdefault(iid, split) == split, f"{iid} in {found[iid]} and {split}"
    return found


def per_task_counts(splits: dict[str, str]) -> dict[str, list[int]]:
    """Instances per split (train, validation, test) of each task (tiny_mie_raw ids are ``<task>-<k>``)."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for iid, split in splits.items():
        counts[iid.rsplit("-", 1)[0]][split] += 1
    return {task: [c[s] for s in MIE_SPLITS] for task, c in counts.items()}


def test_default_split_is_3_1_1_within_every_task(tmp_path):
    raw = tiny_mie_raw(tmp_path / "raw", SIZES)
    summary = build_mie_bench(raw, tmp_path / "out", progress=False)
    assert summary.split_method == "stratified"
    counts = per_task_counts(split_map(tmp_path / "out"))
    assert set(counts) == set(SIZES)
    for task, n in SIZES.items():
        got, shares = counts[task], [Fraction(n * w, 5) for w in (3, 1, 1)]
        assert sum(got) == n
        assert all(math.floor(q) <= c <= math.ceil(q) for c, q in zip(got, shares)), (task, got)
        if n % 5 == 0:
            assert got == [3 * n // 5, n // 5, n // 5]
    totals = [sum(c[s] for c in counts.values()) for s in range(3)]
    assert sum(SIZES.values()) == 143 and totals == [86, 29, 28]  # 85.8 / 28.6 / 28.6: the largest remainders
    rows = {k: v["num_examples"] for k, v in summary.splits.items()}
    assert rows == {s: 2 * t for s, t in zip(MIE_SPLITS, totals)}  # both edits of an instance in its split
    card = (tmp_path / "out" / "README.md").read_text()
    assert "3:1:1 **by instance within each task**" in card and "| train instances | validation instances |" in card


def test_stratified_split_ignores_file_order_and_follows_the_salt(tmp_path):
    in_order = tiny_mie_raw(tmp_path / "a", SMALL)
    shuffled = tiny_mie_raw(tmp_path / "b", SMALL, shuffle_seed=5)
    assert (in_order / "instances.jsonl").read_text() != (shuffled / "instances.jsonl").read_text()
    build_mie_bench(in_order, tmp_path / "out-a", progress=False)
    build_mie_bench(shuffled, tmp_path / "out-b", progress=False)
    first = split_map(tmp_path / "out-a")
    assert split_map(tmp_path / "out-b") == first and len(first) == sum(SMALL.values())
    build_mie_bench(in_order, tmp_path / "out-salt", progress=False, split_salt="another-salt")
    salted = split_map(tmp_path / "out-salt")
    assert salted != first and per_task_counts(salted) == per_task_counts(first)  # other instances, same counts


def _hash_split_as_before(instance_id: str, salt: str = "mie-bench-v1") -> str:
    """The hash split as it was before the stratified default, written out independently."""
    u = int.from_bytes(hashlib.sha256(f"{salt}:{instance_id}".encode()).digest()[:8], "big") / 2.0**64
    return "train" if u < 0.6 else "validation" if u < 0.8 else "test"


def test_hash_split_is_kept_as_an_option_unchanged(tmp_path):
    ids = [f"inst-{i:05d}" for i in range(3000)] + list(instance_ids(SIZES))
    assert [split_of(i) for i in ids] == [_hash_split_as_before(i) for i in ids]
    assert [split_of(i, "x") for i in ids[:500]] == [_hash_split_as_before(i, "x") for i in ids[:500]]
    raw = tiny_mie_raw(tmp_path / "raw", SMALL)
    summary = build_mie_bench(raw, tmp_path / "out", progress=False, split_method="hash")
    got = split_map(tmp_path / "out")
    assert summary.split_method == "hash" and got == {i: _hash_split_as_before(i) for i in got}
    assert "`--split-method hash`" in (tmp_path / "out" / "README.md").read_text()
    with pytest.raises(BuildUsageError, match="split_method must be one of stratified, hash"):
        build_mie_bench(raw, tmp_path / "o2", split_method="random")


def test_a_split_file_assigns_the_splits(tmp_path):
    raw = tiny_mie_raw(tmp_path / "raw", SMALL)
    wanted = {iid: MIE_SPLITS[k % 3] for k, iid in enumerate(sorted(instance_ids(SMALL)))}
    as_csv = tmp_path / "official.csv"
    as_csv.write_text("instance_id,split\n" + "".join(f"{i},{s}\n" for i, s in wanted.items()))
    as_json = tmp_path / "official.json"
    as_json.write_text(json.dumps(wanted, indent=2))
    for split_file in (as_csv, as_json):
        out = tmp_path / f"out-{split_file.suffix[1:]}"
        summary = build_mie_bench(raw, out, progress=False, split_file=split_file)
        assert summary.split_method == "file" and split_map(out) == wanted
        assert f"split file `{split_file.name}`" in (out / "README.md").read_text()
    assert miescore(["build-dataset", "mie-bench", "--raw", str(raw), "--out", str(tmp_path / "cli"), "--no-progress",
                     "--split-file", str(as_csv)]) == 0
    assert split_map(tmp_path / "cli") == wanted


def split_file_problems(raw: Path, split_file: Path) -> dict[tuple, str]:
    """``{(file, line): message}`` of the build with ``split_file``, which must fail and write nothing."""
    with pytest.raises(DatasetValidationError) as exc:
        build_mie_bench(raw, raw.parent / "out", progress=False, split_file=split_file)
    assert not (raw.parent / "out").exists()
    return {(p.file, p.line): p.message for p in exc.value.problems}


def test_split_file_problems_have_file_and_line(tmp_path, capsys):
    raw = tiny_mie_raw(tmp_path / "raw", SMALL)
    ids = list(instance_ids(SMALL))
    lines = ["instance_id,split", f"{ids[0]},train", "ghost,train", f"{ids[1]},dev", f"{ids[0]},test",
             *(f"{i},validation" for i in ids[3:])]  # ids[2] is missing (and ids[1] has a bad split)
    bad_csv = tmp_path / "splits.csv"
    bad_csv.write_text("\n".join(lines) + "\n")
    where = split_file_problems(raw, bad_csv)
    assert "unknown instance 'ghost'" in where[("splits.csv", 3)]
    assert "unknown split 'dev'" in where[("splits.csv", 4)]
    assert "listed twice (first on line 2)" in where[("splits.csv", 5)]
    assert f"instance {ids[2]!r} has no split in splits.csv" == where[("instances.jsonl", 3)]

    bad_json = tmp_path / "splits.json"
    bad_json.write_text('{\n  "%s": "train",\n  "%s": "test",\n  "ghost": "validation",\n  "%s": 3\n}\n'
                        % (ids[0], ids[0], ids[1]))
    where = split_file_problems(raw, bad_json)
    assert "listed twice (first on line 2)" in where[("splits.json", 3)]
    assert "unknown instance 'ghost'" in where[("splits.json", 4)]
    assert "unknown split 3" in where[("splits.json", 5)]
    bad_json.write_text('{"%s": "train",\n "%s" "test"}' % (ids[0], ids[1]))
    [(where, message)] = split_file_problems(raw, bad_json).items()
    assert where == ("splits.json", 2) and "expected ':'" in message

    def cli(*extra):
        return miescore(["build-dataset", "mie-bench", "--raw", str(raw), "--out", str(tmp_path / "out"),
                         "--no-progress", *extra])

    assert cli("--split-file", str(bad_csv)) == 2
    assert "splits.csv:3: unknown instance 'ghost'" in capsys.readouterr().err
    assert cli("--split-file", str(tmp_path / "splits.txt")) == 2
    assert "must be .csv" in capsys.readouterr().err
    assert cli("--split-file", str(bad_csv), "--split-method", "hash") == 2
    assert capsys.readouterr().err.strip() == ("error: --split-file assigns the splits itself; give --split-file or "
                                               "--split-method, not both")


@pytest.mark.parametrize("sizes, totals", [
    ([1] * 8, [5, 2, 1]),  # 8 tasks of one instance: 4.8 / 1.6 / 1.6, not everything in train
    ([1] * 16, [10, 3, 3]),
    ([2] * 8, [10, 3, 3]),
    ([1, 2, 3, 4], [6, 2, 2]),
    ([187, 188, 187, 188] * 4, [1800, 600, 600]),  # the paper's 3,000 in 16 tasks
])
def test_stratified_counts_balance_the_leftovers_across_tasks(sizes, totals):
    from modeling_miescore.data.builders.mie_bench_split import stratified_counts

    counts = stratified_counts(sizes)
    assert [sum(c[s] for c in counts) for s in range(3)] == totals
    for n, got in zip(sizes, counts):  # every task within one instance of each of its shares
        assert sum(got) == n and all(n * w // 5 <= c <= -(-n * w // 5) for c, w in zip(got, (3, 1, 1)))


def test_a_small_build_fills_every_split_and_warns_about_small_ones(tmp_path, capsys):
    raw = tiny_mie_raw(tmp_path / "raw", dict.fromkeys(TASKS[:8], 1))
    assert miescore(["build-dataset", "mie-bench", "--raw", str(raw), "--out", str(tmp_path / "out"),
                     "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "(train 5 instances / 10 rows, validation 2 instances / 4 rows, test 1 instances / 2 rows)" in out
    assert "warning: the test split has only 1 instance(s): correlations on it are noisy" in out
    assert Counter(split_map(tmp_path / "out").values()) == {"train": 5, "validation": 2, "test": 1}
    card = (tmp_path / "out" / "README.md").read_text()
    assert "the validation split has only 2 instance(s)" in card
    assert "not a column of its own" in card  # the image path is a field of the Image storage, not a column
    tiny = tiny_mie_raw(tmp_path / "tiny", {TASKS[0]: 1, TASKS[1]: 1})
    assert miescore(["build-dataset", "mie-bench", "--raw", str(tiny), "--out", str(tmp_path / "tiny-out"),
                     "--no-progress"]) == 0
    assert "warning: no test instances (2 instance(s) in all" in capsys.readouterr().out
