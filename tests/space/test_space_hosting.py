"""Hosting the Spaces on Hugging Face: ``miescore space build`` (front matter, pinned requirements or a wheel,
atomic folder), the assembled folders themselves (the scorer app builds its Blocks, ``evaluate.load`` reads the
metric), ZeroGPU (``@spaces.GPU`` with and without the ``spaces`` package), the ``HF_TOKEN`` secret, and the
sources gallery's accepted payload shapes, called directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
import zipfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("gradio")

import gradio as gr  # noqa: E402
from browser.space_harness import load_app_module  # noqa: E402  (tests/ is on sys.path)
from huggingface_hub import SpaceHardware  # noqa: E402

from modeling_miescore import __version__  # noqa: E402
from modeling_miescore.cli.main import main  # noqa: E402
from modeling_miescore.hub.errors import MIEScoreInputError  # noqa: E402
from modeling_miescore.scoring import loading  # noqa: E402
from modeling_miescore.space import inputs, models, sources_gallery  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FRONT_MATTER_KEYS = {"title", "emoji", "sdk", "sdk_version", "app_file", "license", "short_description",
                     "suggested_hardware"}


def front_matter(readme: Path) -> tuple[dict, str]:
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("---\n"), text[:80]
    _, yaml_text, body = text.split("---\n", 2)
    return yaml.safe_load(yaml_text), body


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_python(code: str, cwd: Path, timeout: int = 300, **env_vars) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_EVALUATE_OFFLINE="1",
               GRADIO_ANALYTICS_ENABLED="False", **env_vars)
    for name in ("MIESCORE_MODEL", "SPATIALREWARD_MODEL", "SPACES_ZERO_GPU", "HF_MODULES_CACHE"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
    return done


# ---------------------------------------------------------------------------------------------- space build


def test_scorer_space_folder_has_front_matter_pins_and_models(tmp_path, capsys):
    out = tmp_path / "scorer"
    code, stdout, err = run_cli(capsys, "space", "build", "--out", out, "--model", "org/miescore-8b",
                                "--spatialreward-model", "org/spatialreward-8b")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "app.py", "requirements.txt", "space_models.json"]
    meta, body = front_matter(out / "README.md")
    assert FRONT_MATTER_KEYS | {"models"} <= set(meta)
    assert meta["sdk"] == "gradio" and meta["sdk_version"] == gr.__version__ and meta["app_file"] == "app.py"
    assert meta["models"] == ["org/miescore-8b", "org/spatialreward-8b"]
    # two 8B bf16 models stay loaded together (~35 GB): a 48 GB L40S; the flavour is one the Hub knows
    assert meta["suggested_hardware"] == "l40sx1" and meta["suggested_hardware"] in {h.value for h in SpaceHardware}
    _, source_body = front_matter(REPO / "spaces" / "miescore" / "README.md")
    assert body == source_body and "HF_TOKEN" in body  # the prose is the checkout's, with the token guidance
    requirements = (out / "requirements.txt").read_text().splitlines()
    assert f"miescore[space]=={__version__}" in requirements
    assert not any(line.startswith("miescore") and "==" not in line for line in requirements)
    assert json.loads((out / "space_models.json").read_text()) == {"model": "org/miescore-8b",
                                                                  "spatialreward_model": "org/spatialreward-8b"}
    assert (out / "app.py").read_bytes() == (REPO / "spaces" / "miescore" / "app.py").read_bytes()
    assert "placeholder" not in stdout and f"miescore[space]=={__version__}" in stdout


def test_one_model_or_none(tmp_path, capsys):
    code, _, err = run_cli(capsys, "space", "build", "--out", tmp_path / "one", "--model", "org/miescore-8b")
    assert code == 0, err
    meta, _ = front_matter(tmp_path / "one" / "README.md")
    assert meta["models"] == ["org/miescore-8b"] and meta["suggested_hardware"] == "l4x1"
    assert json.loads((tmp_path / "one" / "space_models.json").read_text())["spatialreward_model"] is None

    code, stdout, err = run_cli(capsys, "space", "build", "--out", tmp_path / "none", "--hardware", "zero-a10g")
    assert code == 0, err
    meta, _ = front_matter(tmp_path / "none" / "README.md")
    assert meta["models"] == ["your-org/miescore-8b", "your-org/spatialreward-8b"]
    assert meta["suggested_hardware"] == "zero-a10g"
    assert "warning: README.md lists the placeholder models" in stdout
    # placeholders are never served: the app says "not configured" instead of fetching a repo that does not exist
    assert json.loads((tmp_path / "none" / "space_models.json").read_text()) == {"model": None,
                                                                                "spatialreward_model": None}


@pytest.mark.parametrize("argv, message", [
    (["--model", "not a repo"], "--model 'not a repo' is not a Hub repo id"),
    (["--model", "/local/ckpt"], "is not a Hub repo id"),
    (["--hardware", "h100-huge"], "unknown hardware flavour 'h100-huge'; choose one of cpu-basic"),
    (["--kind", "metric", "--model", "org/m"], "the metric Space loads no model"),
])
def test_bad_build_options_exit_2(tmp_path, capsys, argv, message):
    code, _, err = run_cli(capsys, "space", "build", "--out", tmp_path / "space", *argv)
    assert code == 2 and message in err, err
    assert not (tmp_path / "space").exists() and list(tmp_path.iterdir()) == []  # nothing half-written


def test_existing_folder_needs_overwrite_and_is_replaced_whole(tmp_path, capsys):
    out = tmp_path / "space"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    code, _, err = run_cli(capsys, "space", "build", "--out", out)
    assert code == 2 and "already exists" in err and "--overwrite" in err
    assert (out / "stale.txt").read_text() == "old"
    code, _, err = run_cli(capsys, "space", "build", "--out", out, "--overwrite", "--model", "org/m")
    assert code == 0, err
    assert not (out / "stale.txt").exists() and (out / "app.py").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["space"]  # no staging or moved-aside folders left


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_assembled_scorer_app_builds_its_blocks(tmp_path, capsys):
    """Run from the assembled folder (package importable): app.py imports, takes its models from
    space_models.json and builds the Blocks with the two named endpoints, without launching."""
    out = tmp_path / "scorer"
    assert run_cli(capsys, "space", "build", "--out", out, "--model", "org/miescore-8b")[0] == 0
    code = """
        import json
        import app
        args = app.parse_args([])
        demo = app.build_demo(args.model, args.spatialreward_model, example_side=64)
        names = sorted(fn.api_name for fn in demo.fns.values() if isinstance(fn.api_name, str))
        print(json.dumps({"file": app.__file__, "models": [h.reference for h in demo.miescore_models],
                          "type": type(demo).__name__, "api": names}))
    """
    done = run_python(code, out, MIESCORE_SPACE_CACHE=str(tmp_path / "cache"))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).parent == out
    assert result["models"] == ["org/miescore-8b", None] and result["type"] == "Blocks"
    assert {"score", "spatial_reward"} <= set(result["api"])


@pytest.mark.slow  # builds a wheel and imports evaluate + gradio in a subprocess (~60 s)
def test_metric_folder_with_a_wheel_loads_with_evaluate(tmp_path, capsys):
    out = tmp_path / "miescore-metric"  # the Space's name: evaluate.load("ORG/miescore-metric") reads its .py
    checkout = sorted(p.name for p in REPO.iterdir())
    code, stdout, err = run_cli(capsys, "space", "build", "--out", out, "--kind", "metric", "--wheel")
    assert code == 0, err
    assert sorted(p.name for p in REPO.iterdir()) == checkout  # built from a copy: no build/ or egg-info here
    wheel = f"miescore-{__version__}-py3-none-any.whl"
    assert sorted(p.name for p in out.iterdir()) == sorted(["README.md", "app.py", "miescore-metric.py",
                                                            "requirements.txt", wheel])
    assert "hf upload ORG/miescore-metric" in stdout
    assert f"./{wheel}[metric]" in (out / "requirements.txt").read_text().splitlines()
    with zipfile.ZipFile(out / wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"miescore-{__version__}.dist-info/METADATA").decode()
    assert "modeling_miescore/space/space_folder.py" in names and "modeling_miescore/hub/default_skill.txt" in names
    assert f"\nVersion: {__version__}\n" in metadata
    meta, _ = front_matter(out / "README.md")
    assert FRONT_MATTER_KEYS <= set(meta) and "models" not in meta
    assert meta["suggested_hardware"] == "cpu-basic" and meta["sdk_version"] == gr.__version__
    assert {"evaluate", "metric"} <= set(meta["tags"]) and meta["description"]
    predictions = [[50, 60, 55], [40, 45, 42], [70, 72, 68], [30, 20, 35]]
    references = [[52, 58, 50], [35, 47, 44], [66, 75, 70], [33, 25, 30]]
    # evaluate.load(folder), and the Space's own app.py (not run as __main__, so nothing launches)
    code = f"""
        import evaluate, json, runpy
        import pandas as pd
        metric = evaluate.load({str(out)!r})
        direct = metric.compute(predictions={predictions}, references={references})
        space = runpy.run_path({str(out / "app.py")!r}, run_name="space_app")
        table = pd.DataFrame({{"predictions": [json.dumps(r) for r in {predictions}],
                               "references": [json.dumps(r) for r in {references}]}})
        print(json.dumps({{"direct": direct, "widget": space["build_widget"](space["module"]).fn(table)}}))
    """
    done = run_python(code, tmp_path, HF_HOME=str(tmp_path / "hf"))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["direct"]["n"] == 4 and result["direct"]["if_srcc"] == pytest.approx(1.0)
    assert result["widget"] == pytest.approx(result["direct"])


def test_metric_folder_name_must_be_a_space_name(tmp_path, capsys):
    code, _, err = run_cli(capsys, "space", "build", "--kind", "metric", "--out", tmp_path / "app")
    assert code == 2 and "cannot be named 'app'" in err
    code, _, err = run_cli(capsys, "space", "build", "--kind", "metric", "--out", tmp_path / "bad name!")
    assert code == 2 and "'bad name!' cannot be a Space name" in err
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- ZeroGPU


def fake_spaces(calls: list) -> types.ModuleType:
    """A stand-in ``spaces`` package whose ``GPU(duration=...)`` marks and records what it wraps."""
    module = types.ModuleType("spaces")

    def GPU(duration=60):  # noqa: N802 (the package's name)
        def decorate(function):
            def on_gpu(*args, **kwargs):
                calls.append((function.__name__, duration))
                return function(*args, **kwargs)

            on_gpu.__name__, on_gpu.__wrapped__, on_gpu.zero_gpu_duration = function.__name__, function, duration
            return on_gpu

        return decorate

    module.GPU = GPU
    return module


def api_function(demo, api_name):
    return next(fn.fn for fn in demo.fns.values() if fn.api_name == api_name)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    return tmp_path_factory.mktemp("space-examples")


def test_model_calls_run_under_spaces_gpu_when_the_package_is_there(monkeypatch, examples):
    calls = []
    monkeypatch.setitem(sys.modules, "spaces", fake_spaces(calls))
    demo = load_app_module().build_demo(None, None, examples_dir=str(examples), example_side=32)
    score = api_function(demo, "score")
    assert score.zero_gpu_duration == models.MIESCORE_GPU_SECONDS
    with pytest.raises(gr.Error, match="No source images"):
        score([], None, "x")
    with pytest.raises(gr.Error, match="No source images"):
        api_function(demo, "spatial_reward")([], None, "x")
    assert calls == [("run_miescore", models.MIESCORE_GPU_SECONDS),
                     ("run_spatialreward", models.SPATIALREWARD_GPU_SECONDS)]


@pytest.mark.parametrize("installed", [None, types.ModuleType("spaces")], ids=["absent", "namespace-folder"])
def test_without_the_spaces_package_the_calls_are_plain(monkeypatch, installed, examples):
    monkeypatch.setitem(sys.modules, "spaces", installed)  # None: import fails; a module without GPU: ignored
    demo = load_app_module().build_demo(None, None, examples_dir=str(examples), example_side=32)
    score = api_function(demo, "score")
    assert score.__name__ == "run_miescore" and not hasattr(score, "zero_gpu_duration")
    with pytest.raises(gr.Error, match="No source images"):
        score([], None, "x")


class LoadRecorder:
    def __init__(self):
        self.loads, self.moves = [], []

    def __call__(self, reference, device, dtype, token):
        self.loads.append(dict(reference=reference, device=device, dtype=dtype, token=token))
        return self

    def to(self, device):
        self.moves.append(device)
        return self


@pytest.mark.parametrize("zero", [False, True])
def test_models_get_the_hf_token_and_zero_gpu_placement(monkeypatch, zero, examples):
    app = load_app_module()
    recorder = LoadRecorder()
    monkeypatch.setattr(loading, "load_scorer", recorder)
    monkeypatch.setattr(loading, "load_spatialreward", recorder)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_for_test")
    monkeypatch.setenv("SPACES_ZERO_GPU", "true" if zero else "")
    demo = app.build_demo("org/miescore-8b", "org/sr-8b", device="cpu", dtype="auto", examples_dir=str(examples),
                          example_side=32)
    for holder in demo.miescore_models:
        assert holder.get() is recorder
    expected = ("cpu", "bfloat16") if zero else ("cpu", "auto")
    assert [(d["reference"], d["device"], d["dtype"], d["token"]) for d in recorder.loads] == [
        ("org/miescore-8b", *expected, "hf_secret_for_test"), ("org/sr-8b", *expected, "hf_secret_for_test")]
    assert recorder.moves == (["cuda", "cuda"] if zero else [])  # ZeroGPU: placed on "cuda" at start-up
    assert app.parse_args([]).preload is zero  # ZeroGPU forks a worker per call: load before serving

    monkeypatch.delenv("HF_TOKEN")
    app.build_demo("org/m", None, examples_dir=str(examples), example_side=32).miescore_models[0].get()
    assert recorder.loads[-1]["token"] is None


def test_space_models_file_gives_defaults_and_bad_files_are_named(tmp_path, monkeypatch):
    assert models.read_space_models(tmp_path) == {}
    (tmp_path / "space_models.json").write_text(models.space_models_text("org/a", None))
    assert models.read_space_models(tmp_path) == {"model": "org/a", "spatialreward_model": None}
    (tmp_path / "space_models.json").write_text('{"model": 3}')
    with pytest.raises(MIEScoreInputError, match="space_models.json' must be a JSON object"):
        models.read_space_models(tmp_path)
    (tmp_path / "space_models.json").write_text("{")
    with pytest.raises(MIEScoreInputError, match="is unreadable .*miescore space build"):
        models.read_space_models(tmp_path)


# ---------------------------------------------------------------------------------------------- gallery shapes


def test_gallery_payload_shapes_called_directly(tmp_path):
    file = {"path": str(tmp_path / "a.png"), "meta": {"_type": "gradio.FileData"}}
    validate = sources_gallery.SourcesGalleryData.model_validate
    for payload in ([file, file], [[file, "cap"], (file, None)], file, [{"image": file, "caption": None}]):
        entries = validate(payload).model_dump()
        assert [e["image"]["path"] for e in entries] == [file["path"]] * len(entries)
    assert validate([[file, "cap"]]).model_dump()[0]["caption"] == "cap"
    for bad, pattern in (([str(tmp_path / "a.png")], "Source image 1 is a string"),
                         ([file, 3.5], "Source image 2 has an unexpected form \\(float\\)"),
                         ("a.png", "The sources are a str"),
                         ([{"image": file, "caption": ["x"]}], "could not be read")):
        with pytest.raises(gr.Error, match=pattern) as info:
            validate(bad)
        assert sources_gallery.EXPECTED_SHAPE in info.value.message
    # the handlers take the same shapes (direct calls, as in the tests above): bare file dicts give their paths
    assert inputs.gallery_images([file, [file, "cap"]]) == [file["path"], file["path"]]
    gallery = sources_gallery.sources_gallery(label="sources")
    assert isinstance(gallery, gr.Gallery) and gallery.data_model is sources_gallery.SourcesGalleryData
    assert gallery.get_block_name() == "gallery"  # the browser renders its usual gallery
    assert not list(Path(sources_gallery.__file__).parent.glob("*.pyi"))  # Gradio wrote no stub beside it
