"""``miescore doctor CKPT``: is this checkpoint sane? (:mod:`modeling_miescore.diagnostics.doctor`)

Exit status: 0 healthy, 1 warnings, 2 broken; user errors print one line and exit 2. Nothing from the checkpoint
folder runs unless ``--trust-remote-code`` is given (then the fresh-process check loads it as a stranger would).
"""

from __future__ import annotations

import json
import sys

from .main import COMMAND_HELP, add_device_args, quiet_transformers
from ..diagnostics.doctor import diagnose_checkpoint, format_report


def cmd_doctor(args) -> int:
    quiet_transformers()

    def progress(result):
        print(f"doctor: {result.name}: {result.status} ({result.seconds:.1f} s)", file=sys.stderr, flush=True)

    report = diagnose_checkpoint(args.checkpoint, device=args.device, dtype=args.dtype,
                                 fresh_process=not args.skip_fresh_process, quick=args.quick,
                                 on_result=None if args.json else progress, trust_remote_code=args.trust_remote_code)
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return report.exit_code


def register(sub) -> None:
    parser = sub.add_parser("doctor", help=COMMAND_HELP["doctor"])
    parser.add_argument("checkpoint", help="MIEScore or SpatialReward checkpoint folder (a local path)")
    add_device_args(parser)
    parser.add_argument("--json", action="store_true", help="print the check records and a summary as JSON")
    parser.add_argument("--skip-fresh-process", action="store_true",
                        help="do not load the checkpoint again in a second, fresh interpreter")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="RUNS THE CHECKPOINT'S CODE: the fresh interpreter loads it with AutoModel("
                             "trust_remote_code=True) and without this package, as a stranger would; the report names "
                             "the code files it ran and their sha256 (default: through the installed package, "
                             "nothing from the folder runs)")
    parser.add_argument("--quick", action="store_true", help="three small examples and one throughput pass")
    parser.set_defaults(func=cmd_doctor)
