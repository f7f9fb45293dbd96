"""``miescore tokens``: the token budget of a checkpoint's prompts, part by part
(:mod:`modeling_miescore.diagnostics.token_budget`). Only the config and the processor are read, never the
weights. User errors print one line and exit 2.
"""

from __future__ import annotations

import json
import re

from ..hub.errors import MIEScoreInputError
from ..diagnostics import token_budget
from .main import COMMAND_HELP, number_arg, quiet_transformers

_SIZE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_size(text: str) -> tuple[int, int]:
    """``"640x480"`` -> ``(640, 480)``; anything else is a user error naming the expected form."""
    match = _SIZE.match(text or "")
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise MIEScoreInputError(f"--size {text!r} is not WIDTHxHEIGHT in pixels; write it like 1024x768")
    return int(match.group(1)), int(match.group(2))


def cmd_tokens(args) -> int:
    sizes = [parse_size(args.size)] if args.size is not None else list(token_budget.DEFAULT_SIZES)
    sources = [args.sources] if args.sources is not None else list(token_budget.DEFAULT_SOURCES)
    given = args.instruction is not None
    instruction = args.instruction if given else token_budget.DEFAULT_INSTRUCTION
    if not instruction.strip():
        raise MIEScoreInputError("--instruction is empty; pass the editing instruction to count")

    quiet_transformers()
    kind, config, processor = token_budget.load_config_and_processor(args.model)
    budgets = token_budget.checkpoint_budgets(args.model, sources, sizes, args.max_pixels, instruction,
                                              loaded=(kind, config, processor))
    training = token_budget.training_length(args.model, kind)
    answer = int(config.max_new_tokens) if kind == "spatialreward" else 0
    vocabulary = token_budget.vocabulary_note(processor.tokenizer)
    counted = "given (--instruction)" if given else "built-in default (pass --instruction to count yours)"
    if args.json:  # one object per row; what the text header says is repeated in each
        context = {"instruction_source": "given" if given else "default",
                   "training_length": {"tokens": training.tokens, "source": training.source},
                   "answer_tokens": answer, "vocabulary": vocabulary or "qwen"}
        rows = []
        for budget in budgets:
            row = {**budget.to_dict(args.group_size), **context,
                   "over_training_length": budget.total + answer > training.tokens}
            if args.max_length is not None:
                row["shrink"] = token_budget.shrink_to_fit(budget, args.max_length).to_dict()
            rows.append(row)
        print(json.dumps(rows, indent=2))
        return 0
    print(f"token budget of {args.model} ({'MIEScore' if kind == 'miescore' else 'SpatialReward'})")
    print(f"instruction, {counted}: {instruction.strip()!r}")
    if vocabulary:
        print(f"vocabulary: {vocabulary}")
    print()
    print(token_budget.format_budget_table(budgets, args.group_size, args.max_length, training, answer))
    print()
    for line in token_budget.budget_legend(kind, args.group_size, training, budgets, answer):
        print(f"  {line}")
    return 0


def register(sub) -> None:
    parser = sub.add_parser("tokens", help=COMMAND_HELP["tokens"])
    parser.add_argument("--model", required=True, help="MIEScore or SpatialReward checkpoint folder or Hub repo id")
    parser.add_argument("--sources", type=number_arg(int, 1, 64), default=None,
                        help="number of source images (default: 1, 2, 3 and 4)")
    parser.add_argument("--size", default=None, help="WIDTHxHEIGHT of every image (default: 512x512 and 1024x1024)")
    parser.add_argument("--max-pixels", type=number_arg(int, 1), default=None,
                        help="per-image pixel budget (default: the checkpoint's max_pixels)")
    parser.add_argument("--max-length", type=number_arg(int, 1), default=None,
                        help="also show what training's 'shrink' length policy does at this many tokens")
    parser.add_argument("--group-size", type=number_arg(int, 1), default=12,
                        help="edits per group for the prefix-reuse ceiling (default: 12, as in MIE-Bench)")
    parser.add_argument("--instruction", default=None, help="instruction to count (default: a typical one)")
    parser.add_argument("--json", action="store_true", help="print the budgets as JSON")
    parser.set_defaults(func=cmd_tokens)
