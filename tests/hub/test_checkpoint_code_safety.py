"""Issue 13 item 1 and issue 14 item 1: loading a checkpoint runs no code shipped in it and never prompts.

The tampered checkpoints (``corpus.tampered_checkpoint``) carry ``evil_proc.py``, named by ``auto_map`` entries
in ``processor_config.json``, its nested image processor settings and ``tokenizer_config.json``, plus a line in
the checkpoint's own configuration file; each writes a marker file when imported. Every entry point must load
the stock ``Qwen3VLProcessor`` and leave both markers unwritten (only a user's own ``trust_remote_code=True``
may run the model code). MIEScore entry points through the API, CLI, score-batch and server are also in the
bad-input corpus; here: SpatialReward, the Space, the training loaders, saving, and the prompt.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest
from transformers import Qwen3VLProcessor

from corpus.tampered_checkpoint import tamper_checkpoint

PROMPT = "Do you wish to run the custom code"


@pytest.fixture(scope="module")
def tiny_spatialreward_path(tmp_path_factory):
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward", max_new_tokens=8)


@pytest.fixture(scope="module")
def tampered_miescore(tiny_miescore_path, tmp_path_factory):
    return tamper_checkpoint(tiny_miescore_path, tmp_path_factory.mktemp("tampered") / "miescore")


@pytest.fixture(scope="module")
def tampered_spatialreward(tiny_spatialreward_path, tmp_path_factory):
    return tamper_checkpoint(tiny_spatialreward_path, tmp_path_factory.mktemp("tampered") / "spatialreward")


@pytest.fixture(autouse=True)
def _fresh_markers(request):
    """Each test sees only the code its own actions ran."""
    for name in ("tampered_miescore", "tampered_spatialreward"):
        if name in request.fixturenames:
            request.getfixturevalue(name).reset()


@pytest.fixture()
def images(tmp_path):
    from PIL import Image

    for name, colour in (("a.png", (200, 10, 10)), ("e.png", (10, 10, 200))):
        Image.new("RGB", (40, 32), colour).save(tmp_path / name)
    return tmp_path / "a.png", tmp_path / "e.png"


def _assert_stock(processor):
    assert type(processor) is Qwen3VLProcessor
    assert type(processor.tokenizer).__module__.startswith("transformers.models.")
    assert type(processor.image_processor).__module__.startswith("transformers.models.")


def test_load_spatialreward_uses_the_stock_processor_and_runs_nothing(tampered_spatialreward, images):
    from modeling_miescore.scoring.loading import load_spatialreward

    model = load_spatialreward(str(tampered_spatialreward.path), device="cpu", dtype="float32")
    _assert_stock(model.get_processor())
    model.evaluate_edit([images[0]], images[1], "make it blue")
    assert tampered_spatialreward.code_ran() == []


def test_trusting_the_model_code_does_not_trust_the_processor_code(tampered_spatialreward, images):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(tampered_spatialreward.path), trust_remote_code=True)
    model.evaluate_edit([images[0]], images[1], "make it blue")
    _assert_stock(model.get_processor())
    assert tampered_spatialreward.code_ran() == ["MODEL_CODE_RAN"]  # the user trusted this, and only this


def test_spatialreward_cli_runs_nothing(tampered_spatialreward, images, capsys):
    from modeling_miescore.cli.main import main

    code = main(["spatialreward", "--model", str(tampered_spatialreward.path), "--source", str(images[0]),
                 "--edited", str(images[1]), "--instruction", "make it blue", "--json", "--device", "cpu"])
    assert code == 0, capsys.readouterr().err
    assert tampered_spatialreward.code_ran() == []


def test_the_space_loads_both_models_without_running_their_code(tampered_miescore, tampered_spatialreward):
    pytest.importorskip("gradio")
    from browser.space_harness import load_app_module

    demo = load_app_module().build_demo(str(tampered_miescore.path), str(tampered_spatialreward.path),
                                        device="cpu", dtype="float32", examples_dir=None)
    try:
        for holder in demo.miescore_models:
            _assert_stock(holder.get().get_processor())
    finally:
        demo.close()
    assert tampered_miescore.code_ran() == [] and tampered_spatialreward.code_ran() == []


def test_training_loaders_run_nothing(tampered_miescore, tampered_spatialreward):
    from modeling_miescore.training.miescore_model import load_base_model
    from modeling_miescore.training.spatialreward_recipe import load_model_and_processor

    _, processor = load_base_model(str(tampered_miescore.path))
    _assert_stock(processor)
    _, processor = load_model_and_processor(str(tampered_spatialreward.path), dtype=None)
    _assert_stock(processor)
    assert tampered_miescore.code_ran() == [] and tampered_spatialreward.code_ran() == []


def test_saving_a_loaded_processor_writes_no_auto_map(tampered_miescore, tmp_path):
    from modeling_miescore.hub.processing_miescore import PROCESSOR_JSON_FILES, load_stock_processor

    load_stock_processor(tampered_miescore.path).save_pretrained(tmp_path)
    written = [name for name in PROCESSOR_JSON_FILES if (tmp_path / name).is_file()]
    assert "processor_config.json" in written and "tokenizer_config.json" in written
    for name in written:
        assert "auto_map" not in (tmp_path / name).read_text(), name
    assert not list(tmp_path.glob("*.py"))


def test_a_saved_model_has_no_processor_auto_map(tiny_miescore, tmp_path):
    tiny_miescore.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"] == {
        "AutoConfig": "configuration_miescore.MIEScoreConfig", "AutoModel": "modeling_miescore.MIEScoreModel"}
    for name in ("processor_config.json", "tokenizer_config.json"):
        assert "auto_map" not in (tmp_path / name).read_text()


_LOADS = textwrap.dedent("""
    import json, sys, time
    import transformers
    from transformers import AutoProcessor, AutoTokenizer, Qwen2Tokenizer, Qwen3VLProcessor  # imported before timing
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from modeling_miescore.hub.processing_miescore import load_stock_processor
    from modeling_miescore.training.spatialreward_recipe import load_model_and_processor

    loaders = {"stock_loader": load_stock_processor,
               "auto_processor": lambda p: AutoProcessor.from_pretrained(p, trust_remote_code=False),
               "auto_tokenizer": lambda p: AutoTokenizer.from_pretrained(p, trust_remote_code=False),
               "spatialreward_recipe": lambda p: load_model_and_processor(p, dtype=None)}
    seconds = {}
    for kind, path in json.loads(sys.argv[1]).items():
        start = time.monotonic()
        loaders[kind](path)
        seconds[kind] = time.monotonic() - start
    print(json.dumps(seconds))
""")

LOAD_KINDS = ("stock_loader", "auto_processor", "auto_tokenizer", "spatialreward_recipe")


def test_loading_a_processor_never_prompts(tiny_miescore_path, tiny_spatialreward_path):
    """On a terminal (a pseudo-terminal as stdin) transformers' prompt would wait 15 s for an answer. Each
    loader runs in one fresh interpreter (the imports are paid once)."""
    import os
    import pty

    paths = {kind: str(tiny_spatialreward_path if kind == "spatialreward_recipe" else tiny_miescore_path)
             for kind in LOAD_KINDS}
    leader, follower = pty.openpty()
    try:
        result = subprocess.run([sys.executable, "-c", _LOADS, json.dumps(paths)], stdin=follower,
                                capture_output=True, text=True, timeout=600)
    finally:
        os.close(leader)
        os.close(follower)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert PROMPT not in output
    seconds = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(seconds) == set(LOAD_KINDS)
    assert all(value < 5 for value in seconds.values()), seconds


@pytest.mark.parametrize("backbone, processor_class", [("internvl", "InternVLProcessor"),
                                                       ("qwen2_5_vl", "Qwen2_5_VLProcessor")])
def test_other_backbone_families_get_their_stock_processor_and_run_no_code(tiny_checkpoints, tmp_path, backbone,
                                                                          processor_class, images):
    """A scorer on another backbone: the stock class its processor_config names, no planted code run."""
    from modeling_miescore.scoring.loading import load_scorer

    original = tiny_checkpoints("miescore", backbone)
    tampered = tamper_checkpoint(original, tmp_path / "tampered")
    model = load_scorer(str(tampered.path), device="cpu", dtype="float32")
    processor = model.get_processor()
    assert type(processor).__name__ == processor_class and type(processor).__module__.startswith("transformers.")
    edit = {"sources": [str(images[0])], "edited": str(images[1]), "instruction": "make it blue"}
    assert model.score(**edit) == load_scorer(str(original), device="cpu", dtype="float32").score(**edit)
    assert tampered.code_ran() == []


def test_a_processor_class_outside_transformers_is_refused(tiny_checkpoints, tmp_path):
    from modeling_miescore.hub.processing_miescore import load_stock_processor

    tampered = tamper_checkpoint(tiny_checkpoints("miescore", "internvl"), tmp_path / "tampered")
    config = tampered.path / "processor_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "processor_class": "EvilProcessor"}))
    with pytest.raises(ValueError, match="'EvilProcessor', which is not a processor class of transformers"):
        load_stock_processor(tampered.path)
    assert tampered.code_ran() == []


_AUTO_CALL = re.compile(r"\b(Auto[A-Za-z]*)\.from_pretrained\(")


def _calls_without_trust_argument(text: str) -> list[str]:
    """``Auto*.from_pretrained(...)`` calls in ``text`` (balanced parentheses) that do not pass trust_remote_code."""
    found = []
    for match in _AUTO_CALL.finditer(text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        call = text[match.start():end + 1]
        if "trust_remote_code" not in call:
            found.append(call)
    return found


def test_every_documented_snippet_says_what_it_trusts():
    """Issue 25 item 18: without a trust_remote_code argument transformers prompts (and waits) for our
    checkpoints, so every documented Auto* call passes one, or the docs use load_stock_processor."""
    from pathlib import Path

    from modeling_miescore.hub.model_card import ModelCardInfo, render_model_card

    root = Path(__file__).resolve().parents[2]
    docs = {str(p.relative_to(root)): p.read_text() for p in [root / "README.md", *(root / "docs").glob("*.md"),
                                                               *(root / "spaces").glob("*/README.md")]}
    for kind in ("miescore", "spatialreward"):
        for adapter in (False, True):
            docs[f"{kind} card (adapter={adapter})"] = render_model_card(kind, ModelCardInfo(), adapter=adapter)
    offending = {name: calls for name, text in docs.items() if (calls := _calls_without_trust_argument(text))}
    assert not offending, offending
    assert "load_stock_processor(" in docs["docs/scoring.md"] and "cannot avoid transformers'" in docs["docs/scoring.md"]
