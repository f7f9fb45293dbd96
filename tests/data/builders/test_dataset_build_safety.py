"""A build's safety rails: one exit-status rule, API wording vs flag wording, the output lock and the temporary
folders of killed builds, and symbolic links that leave the raw folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.data.builders import output_folder
from modeling_miescore.data.builders.base import BuildUsageError
from modeling_miescore.data.builders.output_folder import HubPushError, HubPushUnavailableError
from modeling_miescore.data.builders.mer_bench import MERBenchBuilder, build_mer_bench
from modeling_miescore.data.builders.output_folder import OutputExistsError
from modeling_miescore.data.builders.raw_files import DatasetValidationError
from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench
from modeling_miescore.utils.output_lock import OutputBusyError


@pytest.fixture(scope="module")
def mer_raw(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("mer") / "raw"
    make_raw_mer_bench(raw, n_samples=4, seed=3, image_size=40)
    return raw


def build(argv) -> int:
    return miescore(["build-dataset", "mer-bench", "--no-progress", "--groups-per-type", "1", *map(str, argv)])


class FakeHub:
    """Stands in for ``huggingface_hub.HfApi``: records calls; ``fail`` names the method that raises."""

    calls: list = []
    fail: str | None = None

    def __init__(self, token=None):
        self.token = token

    def _call(self, name, *args):
        FakeHub.calls.append((name, *args))
        if FakeHub.fail == name:
            raise ConnectionError("Name or service not known")

    def whoami(self):
        self._call("whoami", self.token)
        return {"name": "someone"}

    def create_repo(self, repo_id, **kw):
        self._call("create_repo", repo_id)

    def upload_folder(self, **kw):
        self._call("upload_folder", kw["repo_id"])


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: False)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHub)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test_token")
    FakeHub.calls, FakeHub.fail = [], None
    return FakeHub


# ---------------------------------------------------------------------------------------------
# exit status: 2 = cannot run as given, 1 = a step after the build failed
# ---------------------------------------------------------------------------------------------


def test_an_existing_out_is_exit_2_and_a_file_is_called_a_file(mer_raw, tmp_path, capsys):
    out = tmp_path / "out"
    assert build(["--raw", mer_raw, "--out", out]) == 0
    capsys.readouterr()
    assert build(["--raw", mer_raw, "--out", out]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--overwrite" in err and "overwrite=True" not in err
    a_file = tmp_path / "a_file"
    a_file.write_text("not a dataset")
    assert build(["--raw", mer_raw, "--out", a_file]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and "not empty" not in err and a_file.read_text() == "not a dataset"
    assert build(["--raw", mer_raw, "--out", a_file, "--overwrite"]) == 0 and (a_file / "README.md").is_file()


def test_push_to_hub_that_cannot_work_is_exit_2_before_building(mer_raw, tmp_path, monkeypatch, capsys, fake_hub):
    out = tmp_path / "out"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: True)
    assert build(["--raw", mer_raw, "--out", out, "--push-to-hub", "someone/mer"]) == 2
    err = capsys.readouterr().err
    assert "offline" in err and "--push-to-hub" in err and "push_to_hub" not in err
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: False)
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    assert build(["--raw", mer_raw, "--out", out, "--push-to-hub", "someone/mer"]) == 2
    assert "no Hugging Face token" in capsys.readouterr().err
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: "hf_test_token")
    fake_hub.fail = "whoami"  # the Hub cannot be reached
    assert build(["--raw", mer_raw, "--out", out, "--push-to-hub", "someone/mer"]) == 2
    assert "cannot use the Hub (ConnectionError" in capsys.readouterr().err
    assert fake_hub.calls == [("whoami", "hf_test_token")]  # checked, nothing created or uploaded
    assert not out.exists()


def test_a_push_that_fails_after_the_build_is_exit_1(mer_raw, tmp_path, capsys, fake_hub):
    out = tmp_path / "out"
    fake_hub.fail = "upload_folder"
    assert build(["--raw", mer_raw, "--out", out, "--push-to-hub", "someone/mer"]) == 1
    err = capsys.readouterr().err
    assert "--push-to-hub someone/mer failed" in err and "is complete" in err
    assert [c[0] for c in fake_hub.calls] == ["whoami", "create_repo", "upload_folder"]
    assert (out / "README.md").is_file()
    fake_hub.fail, fake_hub.calls = None, []
    assert build(["--raw", mer_raw, "--out", out, "--push-to-hub", "someone/mer", "--overwrite"]) == 0
    assert [c[0] for c in fake_hub.calls] == ["whoami", "create_repo", "upload_folder"]


def test_a_missing_data_extra_is_exit_2(mer_raw, tmp_path, monkeypatch, capsys):
    def no_pyarrow(self, *args):
        raise ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow")

    monkeypatch.setattr(MERBenchBuilder, "read", no_pyarrow)
    assert build(["--raw", mer_raw, "--out", tmp_path / "out"]) == 2
    assert "pip install 'miescore[data]'" in capsys.readouterr().err


def test_the_api_speaks_in_parameters_and_the_command_line_in_flags(mer_raw, tmp_path, capsys):
    out = tmp_path / "out"
    build_mer_bench(mer_raw, out, progress=False, groups_per_type=1)
    with pytest.raises(OutputExistsError) as exc:
        build_mer_bench(mer_raw, out, progress=False)
    assert "overwrite=True" in str(exc.value) and "--" not in str(exc.value)
    with pytest.raises(BuildUsageError, match=r"^groups_per_type must be >= 0$"):
        build_mer_bench(mer_raw, tmp_path / "o2", groups_per_type=-1)
    with pytest.raises(BuildUsageError, match="min_agreement=2 is not a majority of n_annotators=5"):
        build_mer_bench(mer_raw, tmp_path / "o2", min_agreement=2)
    assert build(["--raw", mer_raw, "--out", tmp_path / "o2", "--min-agreement", "2"]) == 2
    assert capsys.readouterr().err.strip() == "error: --min-agreement=2 is not a majority of --annotators=5"


# ---------------------------------------------------------------------------------------------
# the output lock and the leftovers of killed builds
# ---------------------------------------------------------------------------------------------


def _hold_lock(out: Path) -> subprocess.Popen:
    code = ("import sys, time\nfrom modeling_miescore.utils.output_lock import exclusive_output\n"
            f"with exclusive_output({str(out)!r}, 'output folder'):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_running_build_keeps_its_output_and_temporary_folder(mer_raw, tmp_path, capsys):
    out = tmp_path / "out"
    running_tmp = tmp_path / ".out.tmp-0123456789ab"  # the temporary folder of the build that holds the lock
    running_tmp.mkdir()
    (running_tmp / "half-written.parquet").write_bytes(b"PAR1")
    holder = _hold_lock(out)
    try:
        with pytest.raises(OutputBusyError, match=f"pid {holder.pid}"):
            build_mer_bench(mer_raw, out, progress=False, groups_per_type=1)
        assert build(["--raw", mer_raw, "--out", out]) == 2
        assert f"pid {holder.pid}" in capsys.readouterr().err
        assert running_tmp.is_dir() and (running_tmp / "half-written.parquet").is_file() and not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_folders_left_by_killed_builds_are_removed_and_reported(mer_raw, tmp_path, capfd):
    out = tmp_path / "out"
    build_mer_bench(mer_raw, out, progress=False, groups_per_type=1)
    killed_build = tmp_path / ".out.tmp-aaaaaaaaaaaa"
    killed_overwrite = tmp_path / ".out.old-bbbbbbbbbbbb"  # the replaced dataset; `out` is complete
    for folder in (killed_build, killed_overwrite):
        folder.mkdir()
        (folder / "data").mkdir()
    other_output = tmp_path / ".other.tmp-cccccccccccc"  # another output's folder: not ours to remove
    other_output.mkdir()
    capfd.readouterr()
    build_mer_bench(mer_raw, out, progress=False, groups_per_type=1, overwrite=True)
    err = capfd.readouterr().err
    assert not killed_build.exists() and not killed_overwrite.exists() and other_output.is_dir()
    assert f"removed {killed_build}, a temporary folder left by an interrupted build" in err
    assert f"removed {killed_overwrite}" in err
    # without the dataset, a set-aside dataset is the only copy: kept, and the way back is named
    shutil.rmtree(out)
    killed_overwrite.mkdir()
    build_mer_bench(mer_raw, out, progress=False, groups_per_type=1)
    assert killed_overwrite.is_dir() and f"kept {killed_overwrite}" in capfd.readouterr().err


# ---------------------------------------------------------------------------------------------
# symbolic links that leave the raw folder
# ---------------------------------------------------------------------------------------------


def _linked_raw(mer_raw: Path, tmp_path: Path) -> tuple[Path, int, int]:
    """A copy of the raw release in which samples.jsonl and one candidate's image are links to files outside
    the raw folder, and another candidate's image a link that stays inside. Returns the raw folder and the
    candidates.jsonl lines of the outside and inside links."""
    raw, outside = tmp_path / "raw", tmp_path / "elsewhere"
    shutil.copytree(mer_raw, raw)
    outside.mkdir()
    shutil.move(raw / "samples.jsonl", outside / "samples.jsonl")
    (raw / "samples.jsonl").symlink_to(outside / "samples.jsonl")
    candidates = [json.loads(x) for x in (raw / "candidates.jsonl").read_text().splitlines()]
    leaving, staying = raw / candidates[1]["image"], raw / candidates[2]["image"]
    shutil.move(leaving, outside / leaving.name)
    leaving.symlink_to(outside / leaving.name)
    (raw / "kept").mkdir()
    shutil.move(staying, raw / "kept" / staying.name)
    staying.symlink_to(raw / "kept" / staying.name)
    return raw, 2, 3


def test_symlinks_that_leave_the_raw_folder_are_refused_unless_asked(mer_raw, tmp_path, capsys):
    raw, leaving_line, staying_line = _linked_raw(mer_raw, tmp_path)
    out = tmp_path / "out"
    with pytest.raises(DatasetValidationError) as exc:
        build_mer_bench(raw, out, progress=False, groups_per_type=1)
    where = defaultdict(list)
    for problem in exc.value.problems:
        where[(problem.file, problem.line)].append(problem.message)
    [samples_problem] = where[("samples.jsonl", None)]
    assert "outside the raw folder" in samples_problem and "follow_symlinks=True" in samples_problem
    leaving_messages = where[("candidates.jsonl", leaving_line)]
    assert any(f"leads through a symbolic link to {tmp_path / 'elsewhere'}" in m for m in leaving_messages)
    assert not any("symbolic link" in m for m in where[("candidates.jsonl", staying_line)])  # inside: fine
    assert build(["--raw", raw, "--out", out]) == 2
    err = capsys.readouterr().err
    assert f"candidates.jsonl:{leaving_line}: candidate" in err and "symbolic link" in err
    assert "--follow-symlinks" in err and "follow_symlinks" not in err and not out.exists()
    assert build(["--raw", raw, "--out", out, "--follow-symlinks"]) == 0
    assert build_mer_bench(raw, tmp_path / "api", progress=False, groups_per_type=1, follow_symlinks=True).num_groups


def test_symlinked_raw_folder_and_files_inside_it_are_fine(mer_raw, tmp_path):
    link = tmp_path / "raw-link"
    link.symlink_to(mer_raw, target_is_directory=True)
    summary = build_mer_bench(link, tmp_path / "out", progress=False, groups_per_type=1)
    assert summary.num_groups == 3


def test_hub_errors_before_and_after_building_are_told_apart():
    assert issubclass(HubPushUnavailableError, HubPushError)
    with pytest.raises(HubPushUnavailableError, match="invalid repository id"):
        output_folder.check_hub_push("not a/valid/repo")
