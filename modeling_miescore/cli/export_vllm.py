"""``miescore export-vllm CKPT OUT``: a SpatialReward checkpoint of this package in the plain Qwen3-VL layout, which
vLLM serves without running any code from the folder, or a MIEScore (regression-head) checkpoint in the layout of
the MIEScore vLLM plugin (``scripts/vllm_plugin``, pooling runner) (:mod:`modeling_miescore.scoring.vllm_export`).

User errors (a missing folder, a LoRA-adapter folder, a checkpoint of another kind, a tokenizer that does not load,
a file linked out of the checkpoint folder, an OUT that exists or lies inside the checkpoint) print one line and
exit 2; a disk that refuses the export (full) prints one line and exits 1, leaving nothing behind.
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
