"""Helpers shared by tests/space/test_space.py and tests/space/test_space_browser.py: run the Space in-process on
127.0.0.1, and give the tiny SpatialReward model a fixed, well-formed generation.

A tiny random model never writes parseable JSON, so without the fixed generation only the "unparseable
output" path of the SpatialReward tab could be tested; with it the real parsing, aggregation, boxes and
highlighting code runs on a known answer.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path

# Tests talk to 127.0.0.1 only: no usage analytics calls from Gradio.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

REPO = Path(__file__).resolve().parents[2]
APP_PATH = REPO / "spaces" / "miescore" / "app.py"

# A grounded SC answer in the paper's multi-source format (appendix D.1.2) and a PQ answer (D.1.3).
GROUNDED_SC = (
    '{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [550, 350, 950, 950]}, '
    '{"id": 1, "label": "coffee cup", "bbox_2d": [100, 50, 600, 700]}], '
    '"reasoning": "The scene keeps <|bbox_1|> the coffee cup from image 1 unchanged. <|bbox_0|> The cat from '
    'image 2 now sits on the table, slightly cut off. <|global|> Overall the fusion is plausible.", '
    '"score": [18, 20]}'
)
GROUNDED_PQ = '{"reasoning": "Natural lighting; a soft seam around the cat.", "score": [19, 16]}'
GROUNDED_REGIONS = {0: ("cat", [550, 350, 950, 950]), 1: ("coffee cup", [100, 50, 600, 700])}
GROUNDED_SCORES = {"s_if": 18.0, "s_con": 20.0, "s_nat": 19.0, "s_art": 16.0}


_TINY_SPATIALREWARD: list = []


def tiny_spatialreward(tmp_path_factory) -> Path:
    """One tiny SpatialReward checkpoint per test session, shared by the Space test modules."""
    if not _TINY_SPATIALREWARD:
        from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

        _TINY_SPATIALREWARD.append(build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward"))
    return _TINY_SPATIALREWARD[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_app_module():
    """Import spaces/miescore/app.py (not a package) once per process."""
    name = "miescore_space_app"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, APP_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def launch(model, spatialreward_model, examples_dir, **kwargs):
    """Build and launch the Space in this process on 127.0.0.1; returns ``(demo, url)``. Close with demo.close()."""
    app = load_app_module()
    demo = app.build_demo(str(model) if model else None, str(spatialreward_model) if spatialreward_model else None,
                          device="cpu", dtype="float32", examples_dir=str(examples_dir), example_side=160, **kwargs)
    demo.queue(default_concurrency_limit=1, max_size=8)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                            quiet=True, **app.LAUNCH_OPTIONS)
    return demo, url


def ground_spatialreward(model, sc_text: str = GROUNDED_SC, pq_text: str = GROUNDED_PQ):
    """Make a loaded SpatialRewardModel answer every SC prompt with ``sc_text`` and every PQ prompt with
    ``pq_text`` (instance attribute; everything after generation runs unchanged). Returns an undo function."""

    def fixed(prompts, processor):
        # SC prompts carry the sources and the edited image, PQ prompts only the edited image.
        n = int(getattr(model.config, "num_passes", 1) or 1)
        return [[sc_text if len(images) > 1 else pq_text] * n for images, _ in prompts]

    model._generate_texts = fixed

    def undo():
        model.__dict__.pop("_generate_texts", None)

    return undo
