"""``miescore spatialreward``: judge one edit with SpatialReward (boxes, reasoning, sub-scores, reward).

User errors (missing images, empty instruction, wrong checkpoint, bad --draw path) print one line and exit 2.
A generation that cannot be parsed is not a user error: it is reported (``failed``) and the exit status is 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..judges.chat_client import DEFAULT_MAX_ANSWER_BYTES
from .main import COMMAND_HELP, add_device_args, number_arg, quiet_transformers
from .score import add_edit_args, load_cli_edit

_DRAW_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")


def _fmt(value) -> str:
    return "   n/a" if value is None else f"{value:6.2f}"


def format_result(result) -> str:
    """Human-readable summary of a SpatialRewardResult."""
    status = "FAILED (" + ", ".join(result.failure_reasons) + ")" if result.failed else "ok"
    lines = [f"reward           {result.reward:8.4f}   [{status}]",
             f"instruction (IF) {_fmt(result.s_if)} / 25    consistency (CON) {_fmt(result.s_con)} / 25",
             f"naturalness      {_fmt(result.s_nat)} / 25    artifacts         {_fmt(result.s_art)} / 25",
             f"SC               {_fmt(result.sc)} / 25    PQ                {_fmt(result.pq)} / 25",
             "edit regions (id, label, box 0-1000 -> pixels):" if result.regions else "edit regions: none"]
    lines += [f"  {region['id']:>2}  {region['label'] or '-':<30} {region['bbox_2d']} -> {region['bbox_pixels']}"
              for region in result.regions]
    issues = [f"{stream}:{code}" for stream, codes in result.issues.items() for code in codes]
    for label, text in (("SC reasoning: ", result.reasoning), ("PQ reasoning: ", result.pq_reasoning),
                        ("parser issues: ", ", ".join(issues))):
        if text:
            lines.append(label + text)
    return "\n".join(lines)


def cmd_spatialreward(args) -> int:
    if args.draw:
        draw_path = Path(args.draw)
        if draw_path.suffix.lower() not in _DRAW_SUFFIXES:
            raise MIEScoreInputError(f"--draw '{args.draw}' needs an image file name ending in one of "
                                     f"{', '.join(_DRAW_SUFFIXES)}")
        if not draw_path.parent.is_dir():
            raise MIEScoreInputError(f"--draw '{args.draw}': folder '{draw_path.parent}' does not exist")
    if args.config and not args.api_base:
        raise MIEScoreInputError("--config goes with --api-base (local weights carry their own settings)")
    sample = load_cli_edit(args)  # full size: region boxes are given in the edited image's pixels
    sources, edited = sample.sources, sample.edited
    quiet_transformers()
    if args.api_base:
        from ..judges.spatialreward_api import SpatialRewardAPI

        try:
            scorer = SpatialRewardAPI(args.api_base, args.model, timeout=args.timeout,
                                      max_answer_bytes=args.max_answer_bytes, config=args.config)
        except ValueError as err:
            raise MIEScoreInputError(f"--api-base/--model: {err}") from None
    else:
        from ..scoring.loading import load_spatialreward

        scorer = load_spatialreward(args.model, device=args.device, dtype=args.dtype)
    if args.max_new_tokens is not None:
        scorer.config.max_new_tokens = args.max_new_tokens
    budget = {} if args.api_base else {"max_sample_pixels": args.max_sample_pixels}  # the API checks no budget
    result = scorer.evaluate_edit(sources, edited, sample.instruction, **budget)
    refused = scorer.refusal() if args.api_base else None
    if refused:
        raise MIEScoreInputError(refused)

    if args.draw:
        from ..hub.spatialreward_drawing import draw_regions

        try:
            draw_regions(edited, result.regions).save(args.draw)
        except (OSError, ValueError) as err:
            raise MIEScoreInputError(f"could not write --draw '{args.draw}': {err}") from None
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    else:
        print(format_result(result))
        if args.draw:
            print(f"boxes drawn on the edited image: {args.draw}")
    if result.failed:
        print("warning: the judge's output could not be used (" + ", ".join(result.failure_reasons) + "); the "
              "reward is the configured failure value. The raw texts are in --json output.", file=sys.stderr)
    for kind, message in (scorer.stats["error_messages"].items() if args.api_base else ()):
        print(f"warning: {kind} error from the server: {message}", file=sys.stderr)
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "spatialreward", help=COMMAND_HELP["spatialreward"])
    parser.add_argument("--model", required=True,
                        help="SpatialReward checkpoint folder or Hub repo id (ours or the authors' plain Qwen3-VL "
                             "one); with --api-base, the model name the server expects")
    parser.add_argument("--api-base", default=None, metavar="URL",
                        help="use an OpenAI-compatible server instead of local weights, e.g. "
                             "http://127.0.0.1:8000/v1 (API key from $OPENAI_API_KEY)")
    parser.add_argument("--config", default=None, metavar="CHECKPOINT",
                        help="with --api-base: read the SpatialReward settings (prompts, pixel range, max_new_tokens) "
                             "from this checkpoint folder or config.json, e.g. the export the server serves "
                             "(default: the paper's)")
    parser.add_argument("--timeout", type=number_arg(float, minimum=0, exclusive=True), default=120.0,
                        help="seconds one API request attempt may take in all, the answer included (with --api-base)")
    parser.add_argument("--max-answer-bytes", type=number_arg(int, minimum=1), default=DEFAULT_MAX_ANSWER_BYTES,
                        help=f"the most bytes one API answer may take (with --api-base; default "
                             f"{DEFAULT_MAX_ANSWER_BYTES})")
    add_edit_args(parser)
    parser.add_argument("--json", action="store_true", help="print the full result as one JSON object")
    parser.add_argument("--draw", metavar="OUT.png", help="write the edited image with the edit regions drawn")
    parser.add_argument("--max-new-tokens", type=number_arg(int, minimum=1), default=None,
                        help="override the config's generation budget")
    add_device_args(parser)
    parser.set_defaults(func=cmd_spatialreward)


__all__ = ["register", "cmd_spatialreward", "format_result"]
