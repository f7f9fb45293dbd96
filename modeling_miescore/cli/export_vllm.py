"""``miescore export-vllm CKPT OUT``: a SpatialReward checkpoint in the plain Qwen3-VL layout (vLLM serves it without
running code from the folder), or a MIEScore checkpoint in the layout of the MIEScore vLLM plugin
(:mod:`modeling_miescore.scoring.vllm_export`). User errors print one line and exit 2; a disk that refuses the
export (full) prints one line and exits 1, leaving nothing behind.
"""

from __future__ import annotations

import sys

from .main import COMMAND_HELP, quiet_transformers
from ..scoring.vllm_export import export_for_vllm


def cmd_export_vllm(args) -> int:
    quiet_transformers()  # the exported tokenizer is loaded once, as a check
    out = export_for_vllm(args.checkpoint, args.out)
    print(f"exported {args.checkpoint} -> {out} (plain Qwen3-VL layout; serve it with scripts/vllm_cpu.sh start {out}, "
          f"or vllm serve {out})", file=sys.stderr)
    return 0


def register(sub) -> None:
    parser = sub.add_parser("export-vllm", help=COMMAND_HELP["export-vllm"])
    parser.add_argument("checkpoint", help="a SpatialReward or MIEScore checkpoint folder saved by this package "
                                           "(for a LoRA run, its merged/ folder)")
    parser.add_argument("out", help="the new folder to write (must not exist)")
    parser.set_defaults(func=cmd_export_vllm)


__all__ = ["cmd_export_vllm", "register"]
