"""``miescore analyze-attention``: where a generative judge looks while it reasons (SpatialReward paper sec. 5.4,
Table 5; appendix C.1). The language model is switched to eager attention, the only implementation that returns
attention weights. Bad input lines are reported and skipped (exit status 1 at the end) or stop the run
(``--on-error stop``, exit 2); user errors print one line and exit 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tqdm.auto import tqdm

from ..hub.errors import MIEScoreInputError
from ..utils.output_paths import ensure_folder
from .main import COMMAND_HELP, add_device_args, finish_run, number_arg, quiet_transformers
from ..analysis.attention_maps import (DEFAULT_GRID_SIZE, DEFAULT_NUM_LAYERS, RESIZE_MODES, TOKEN_SELECTIONS,
                                       TOP_FRACTION, extract_attention_maps, use_eager_attention)
from ..analysis.attention_report import attention_table, overlay_file_name, write_attention_report, write_overlay
from ..scoring.jsonl_scoring import check_input_file, iter_input, line_entries, record_to_sample
from ..scoring.loading import load_spatialreward

__all__ = ["cmd_analyze_attention", "register"]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze-attention",
        help=COMMAND_HELP["analyze-attention"])
    parser.add_argument("--model", required=True,
                        help="SpatialReward checkpoint folder or Hub repo id (or a plain Qwen3-VL one, as a baseline)")
    parser.add_argument("--input", required=True, help='JSONL lines {"id", "sources": [...], "edited", "instruction"}')
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="folder for metrics.json, table.md, maps.npz and overlays/ (created)")
    parser.add_argument("--label", default=None, help="method name in table.md (default: the model folder name)")
    parser.add_argument("--tokens", choices=TOKEN_SELECTIONS, default="reasoning",
                        help="query tokens: the answer's reasoning string (default, as the paper) or all generated")
    parser.add_argument("--layers", type=number_arg(int, minimum=1), default=DEFAULT_NUM_LAYERS,
                        help=f"average the last N decoder layers (default {DEFAULT_NUM_LAYERS}, as the paper)")
    parser.add_argument("--grid", type=number_arg(int, minimum=2), default=DEFAULT_GRID_SIZE,
                        help=f"maps are resized to GRID x GRID (default {DEFAULT_GRID_SIZE}, as the paper)")
    parser.add_argument("--resize", choices=RESIZE_MODES, default="area",
                        help="resampling to the grid: area (cell means; default) or antialiased bilinear")
    parser.add_argument("--limit", type=number_arg(int, minimum=1), default=None,
                        help="analyse at most this many edits (the first ones that work)")
    parser.add_argument("--max-new-tokens", type=number_arg(int, minimum=1), default=None,
                        help="override the checkpoint's generation budget")
    parser.add_argument("--no-overlays", action="store_true", help="do not draw overlays/<id>.png")
    parser.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                        help="a bad input line is reported with its line number and skipped (default) or stops the run")
    add_device_args(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=cmd_analyze_attention)


def _log(message: str) -> None:
    tqdm.write(message, file=sys.stderr)


class _Lines:
    """The input's edits, with every bad line reported (skip) or raised (stop) with its number."""

    def __init__(self, input_path: Path, on_error: str):
        self.input_path, self.on_error, self.failed = input_path, on_error, []

    def fail(self, number: int, message: str) -> None:
        if self.on_error == "stop":
            raise MIEScoreInputError(f"{self.input_path}: line {number}: {message} "
                                     "(rerun with --on-error skip to skip bad lines)")
        self.failed.append({"line": number, "message": message})
        _log(f"skipped {self.input_path}:line {number}: {message}")

    def samples(self):
        """``(line number, EditSample)`` per usable line; ids must be unique (overlays are named by id)."""
        for number, record, error, _ in line_entries(iter_input(self.input_path)):
            try:
                sample = None if error else record_to_sample(record, self.input_path.parent)
            except MIEScoreInputError as err:
                error = str(err)
            if error:
                self.fail(number, error)
            else:
                yield number, sample


def _is_fatal(err: BaseException) -> bool:
    """Out of memory concerns the machine, not the edit: it stops the run."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"


def cmd_analyze_attention(args) -> int:
    input_path = check_input_file(args.input)
    draw = not args.no_overlays
    out_dir = ensure_folder(args.out, "--out", named=True)
    if draw:
        ensure_folder(out_dir / "overlays", "--out", note=lambda _: None)  # part of the report, not worth a note
    if draw and importlib.util.find_spec("matplotlib") is None:
        raise MIEScoreInputError("overlays need matplotlib: pip install 'miescore[plots]', or pass --no-overlays")
    quiet_transformers()
    model = load_spatialreward(args.model, device=args.device, dtype=args.dtype)
    processor = model.get_processor()
    use_eager_attention(model, log=_log)
    lines = _Lines(input_path, args.on_error)
    results, overlays, taken = [], {}, set()
    with tqdm(desc="analyze-attention", unit="edit", total=args.limit, file=sys.stderr,
              disable=args.no_progress) as bar:
        for number, sample in lines.samples():
            try:
                loaded = sample.load()
                result = extract_attention_maps(
                    model, loaded, processor, num_layers=args.layers, grid_size=args.grid, tokens=args.tokens,
                    resize_mode=args.resize, max_new_tokens=args.max_new_tokens, log=_log)
            except (MIEScoreInputError, OSError, ValueError, RuntimeError) as err:
                if _is_fatal(err):
                    raise
                lines.fail(number, f"could not be analysed ({type(err).__name__}: {err})")
                continue
            results.append(result)
            if draw:
                name = overlay_file_name(result.id, taken)
                write_overlay(out_dir / "overlays" / name, loaded, result)
                overlays[result.id] = f"overlays/{name}"
            bar.update(1)
            if args.limit is not None and len(results) >= args.limit:
                break
    if not results:
        raise MIEScoreInputError(f"no edit of '{input_path}' could be analysed ({len(lines.failed)} bad lines, "
                                 "listed above); check the input lines")
    label = args.label or Path(str(args.model).rstrip("/")).name
    settings = {
        "model": str(args.model), "input": str(input_path), "label": label,
        "paper": "SpatialReward (arXiv 2602.07458) sec. 5.4 Table 5, appendix C.1",
        "layers": results[0].layers, "grid_size": args.grid, "tokens": args.tokens, "resize_mode": args.resize,
        "attn_implementation": "eager", "top_fraction": TOP_FRACTION,
        "source_map": "A_src is the mean of the per-source maps (each normalised to sum 1)",
        "max_new_tokens": args.max_new_tokens or int(model.config.max_new_tokens),
        "failed_lines": lines.failed,
    }
    metrics = write_attention_report(out_dir, results, settings, label=label, overlays=overlays)
    print(attention_table([(label, metrics)]), end="")
    fallback = sum(1 for r in results if r.note)
    if fallback:
        print(f"note: {fallback} of {len(results)} answers had no reasoning string; all their generated tokens "
              "were used (see 'note' per sample)", file=sys.stderr)
    drawn = f", {len(overlays)} overlays in {out_dir / 'overlays'}" if draw else ""
    return finish_run(f"analysed {len(results)} edits -> {out_dir / 'metrics.json'}, {out_dir / 'table.md'}, "
                      f"{out_dir / 'maps.npz'}{drawn}",
                      f"{len(lines.failed)} input lines were skipped (listed above); fix them and rerun" if lines.failed
                      else None)
