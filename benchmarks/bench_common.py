"""Helpers shared by the CPU benchmark scripts (run them as `python benchmarks/<script>.py`)."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "camera")


def real_photos(size: int, names=PHOTOS) -> list[Image.Image]:
    """Real photos shipped with scikit-image, resized to size x size RGB."""
    from skimage import data

    return [Image.fromarray(getattr(data, n)()).convert("RGB").resize((size, size)) for n in names]


def photo_samples(count: int, size: int) -> list[dict]:
    """`count` two-source edits (2 sources + edited image, size x size) drawn from four real photos."""
    photos = real_photos(size, PHOTOS[:4])
    rng = np.random.default_rng(0)
    samples = []
    for i in range(count):
        a, b, c = rng.choice(len(photos), size=3, replace=False)
        samples.append({"sources": [photos[a], photos[b]], "edited": photos[c],
                        "instruction": f"Combine the subject of image 2 into image 1, variant {i}."})
    return samples


def group_of_edits(images: list[Image.Image], num_sources: int, group_size: int, seed: int = 0) -> list[dict]:
    """`group_size` edits of the same sources and instruction (an MIE-Bench instance, or G RL candidates): the
    first `num_sources` images are the sources, each edit is one of the other images with its own noise."""
    rng = np.random.default_rng(seed)
    size = images[0].size
    sources = images[:num_sources]
    others = images[num_sources:] or images
    edits = [Image.fromarray(np.clip(np.asarray(others[i % len(others)], dtype=np.int16)
                                     + rng.integers(-20, 20, (size[1], size[0], 3)), 0, 255).astype(np.uint8))
             for i in range(group_size)]
    return [{"sources": sources, "edited": edit, "instruction": "Compose the subjects of the source images into one "
             "scene, keeping the background of image 1."} for edit in edits]


def best_time(fn, repeats: int) -> tuple[float, object]:
    """Best wall-clock seconds of `repeats` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def interleaved_best(fns, repeats: int):
    """Best wall and CPU (process) seconds of each fn, alternating the fns every repeat so that the load of a
    shared machine drifts over both alike; CPU time is the steadier figure there. Returns [(wall, cpu, result)]."""
    best = [[float("inf"), float("inf"), None] for _ in fns]
    for _ in range(repeats):
        for slot, fn in zip(best, fns):
            wall, cpu = time.perf_counter(), time.process_time()
            result = fn()
            slot[0] = min(slot[0], time.perf_counter() - wall)
            slot[1] = min(slot[1], time.process_time() - cpu)
            slot[2] = result
    return best


# One option of a benchmark's command line: (flag, type, default, help); type bool makes a switch. In an options
# table a plain string instead starts a titled group of the options below it (one section of the benchmark).
Option = tuple[str, type, object, str]


def benchmark_args(doc: str, options: list[Option | str], threads: int = 2, repeats: int = 3, argv=None):
    """Parse a benchmark's command line: its ``options`` table plus ``--threads`` (torch's CPU threads, set
    here) and ``--repeats`` (best of this many timed runs per path)."""
    import torch

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    group = parser
    for option in options:
        if isinstance(option, str):
            group = parser.add_argument_group(option)
            continue
        flag, kind, default, help_text = option
        if kind is bool:
            group.add_argument(flag, action="store_true", help=help_text)
        else:
            group.add_argument(flag, type=kind, default=default, help=help_text)
    parser.add_argument("--threads", type=int, default=threads, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=repeats, help="best of this many timed runs per path")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return parser, args


def sectioned_args(doc: str, options: list[Option], sections, quick: dict, repeats: int, argv=None):
    """:func:`benchmark_args` for a script of sections: ``--quick`` (its options include it) sets the ``quick``
    values, and ``--sections`` (a comma-separated option) becomes a list checked against ``sections``."""
    parser, args = benchmark_args(doc, options, repeats=repeats, argv=argv)
    if args.quick:
        for key, value in quick.items():
            setattr(args, key, value)
    args.sections = args.sections.split(",")
    unknown = set(args.sections) - set(sections)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(sections)}")
    return parser, args


def tiny_scorer(**config_kwargs):
    """A tiny random MIEScore checkpoint, built in a temporary folder and loaded on CPU in float32."""
    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.testing import build_tiny_miescore

    with tempfile.TemporaryDirectory() as tmp:
        return load_scorer(str(build_tiny_miescore(Path(tmp) / "tiny", **config_kwargs)), device="cpu",
                           dtype="float32")


def titled_table(title: str, header: list[str], rows: list[list]) -> str:
    """A ``### title`` and a markdown table of ``rows`` under ``header``."""
    from modeling_miescore.utils.markdown_table import markdown_table

    return f"### {title}\n\n{markdown_table(header, rows)}\n"


def shaped_checkpoint(shape: str, folder: Path) -> Path:
    """The shape's checkpoint in ``folder``, built there the first time (an 8B-wide one takes minutes)."""
    from modeling_miescore.testing.qwen3vl_shapes import build_shaped_miescore
    from modeling_miescore.testing.qwen_vocab import default_cache_dir

    path = Path(folder) / f"{shape}-1x1"
    if not (path / "config.json").is_file():
        Path(folder).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=folder))
        build_shaped_miescore(staging, shape, cache_dir=default_cache_dir())
        shutil.rmtree(path, ignore_errors=True)
        staging.rename(path)
    return path
