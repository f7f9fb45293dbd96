"""Shared fixtures: tiny checkpoints are built once per test session (offline, a few seconds each)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@pytest.fixture(scope="session")
def tiny_miescore_path(tmp_path_factory):
    from modeling_miescore.testing import build_tiny_miescore

    return build_tiny_miescore(tmp_path_factory.mktemp("ckpt") / "tiny-miescore")


@pytest.fixture(scope="session")
def tiny_qwen3vl_path(tmp_path_factory):
    from modeling_miescore.testing import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3vl")


@pytest.fixture(scope="session")
def tiny_spatialreward_path(tmp_path_factory):
    """A tiny SpatialReward checkpoint with an 8-token generation budget (its texts depend on the images)."""
    from modeling_miescore.testing import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward", max_new_tokens=8)


@pytest.fixture(scope="session")
def tiny_miescore(tiny_miescore_path):
    from modeling_miescore.scoring.loading import load_scorer

    return load_scorer(str(tiny_miescore_path), device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def examples():
    from modeling_miescore.data.example_edits import example_edits

    return example_edits(max_side=160)


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Tiny checkpoints of other backbone families, built once per session on first use:
    ``tiny_checkpoints("backbone", "internvl")`` (the plain VLM) or ``tiny_checkpoints("miescore", "qwen2_5_vl",
    score_head="lm_digits")`` (a MIEScore checkpoint on it; keyword arguments go to MIEScoreConfig)."""
    from modeling_miescore.testing import build_tiny_backbone, build_tiny_miescore

    built = {}

    def get(kind: str, backbone: str, **config_kwargs):
        key = (kind, backbone, tuple(sorted(config_kwargs.items())))
        if key not in built:
            folder = tmp_path_factory.mktemp("ckpt") / f"tiny-{kind}-{backbone}"
            built[key] = (build_tiny_backbone(backbone, folder) if kind == "backbone"
                          else build_tiny_miescore(folder, backbone=backbone, **config_kwargs))
        return built[key]

    return get


@pytest.fixture(scope="session")
def tiny_editor_path(tmp_path_factory):
    """Tiny random diffusers editing pipelines, built once per session on first use: ``tiny_editor_path(name)``
    for a name of ``modeling_miescore.testing.tiny_editors.TINY_EDITOR_BUILDERS``."""
    from modeling_miescore.testing.tiny_editors import build_tiny_editor

    built = {}

    def get(name: str):
        if name not in built:
            built[name] = build_tiny_editor(name, tmp_path_factory.mktemp("editor") / name)
        return built[name]

    return get


@pytest.fixture(scope="module")
def miescore_replicas(tiny_miescore_path):
    """Two `miescore serve` replicas of the tiny MIEScore on background threads, ``[(server, backend)]``; each
    backend is an ``editor_rl_runs.RecordingBackend`` (``backend.seen``: (instruction, group id) per sample)."""
    from editor_rl_runs import RecordingBackend

    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.serving.app import serve_in_background
    from modeling_miescore.serving.settings import ServerSettings

    backends = [RecordingBackend(load_scorer(str(tiny_miescore_path), device="cpu", dtype="float32"))
                for _ in range(2)]
    servers = [serve_in_background(b, ServerSettings(max_wait_ms=20)).start() for b in backends]
    yield list(zip(servers, backends))
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def toy_editor_path(tmp_path_factory):
    """The toy editor of ``modeling_miescore.testing.toy_editor`` (not a diffusers pipeline; a 16 px "latent"),
    built once per session: ``--pipeline modeling_miescore.testing.toy_editor:load_toy_editor --model PATH``."""
    from modeling_miescore.testing.toy_editor import build_toy_editor

    return build_toy_editor(tmp_path_factory.mktemp("toy") / "toy")


@pytest.fixture(scope="session")
def editing_requests(tmp_path_factory):
    """Four tiny editing requests (JSONL + 64 px PNG sources from scikit-image photos)."""
    from modeling_miescore.testing.editing_requests import write_editing_requests

    return write_editing_requests(tmp_path_factory.mktemp("requests") / "rows.jsonl")


@pytest.fixture
def single_thread():
    """One torch thread for the test (tiny models: a second thread only adds contention on a busy machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
