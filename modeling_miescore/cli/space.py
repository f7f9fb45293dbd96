"""``miescore space build``: assemble a ready-to-push Hugging Face Space folder from this checkout
(:func:`modeling_miescore.space.space_folder.build_space_folder`).
"""

from __future__ import annotations

from .main import COMMAND_HELP

from ..space.space_folder import (
    HARDWARE_METRIC,
    HARDWARE_ONE_MODEL,
    HARDWARE_TWO_MODELS,
    KINDS,
    build_space_folder,
)


def cmd_space_build(args) -> int:
    built = build_space_folder(args.out, args.kind, model=args.model, spatialreward_model=args.spatialreward_model,
                               hardware=args.hardware, wheel=args.wheel, overwrite=args.overwrite)
    print(f"{args.kind} Space assembled in '{built.folder}': {', '.join(built.files)}")
    print(f"requirements.txt installs: {built.requirement}")
    if built.placeholders:
        print(f"warning: README.md lists the placeholder models {', '.join(built.placeholders)}; rerun with "
              "--model ORG/NAME (and --spatialreward-model ORG/NAME), or edit `models:` before pushing")
    if args.kind == "metric":  # evaluate.load("ORG/NAME") reads NAME.py: the Space must carry the folder's name
        name = built.folder.name
        print(f"push it: hf upload ORG/{name} '{built.folder}' . --repo-type space; then evaluate.load('ORG/{name}')")
    else:
        print(f"push it: hf upload ORG/SPACE_NAME '{built.folder}' . --repo-type space")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "space", help=COMMAND_HELP["space"],
        description="Hugging Face Spaces of this repository (spaces/).")
    commands = parser.add_subparsers(dest="space_command", required=True)
    build = commands.add_parser(
        "build", help="assemble the scorer or metric Space into a new folder",
        description="Copy the Space's files from this checkout into OUT with README.md front matter completed "
                    "(sdk_version, suggested_hardware, models) and requirements.txt pinned to this miescore "
                    "version (or to a wheel of this checkout with --wheel). The folder is written whole or not "
                    "at all.")
    build.add_argument("--out", required=True,
                       help="the folder to create (metric: named as the Space, since evaluate.load('ORG/NAME') "
                            "reads NAME.py)")
    build.add_argument("--kind", choices=sorted(KINDS), default="scorer",
                       help="scorer: the Gradio scoring Space; metric: the evaluate metric Space (default: scorer)")
    build.add_argument("--model", default=None, help="Hub repo id of the MIEScore model the scorer Space serves")
    build.add_argument("--spatialreward-model", default=None,
                       help="Hub repo id of the SpatialReward model the scorer Space serves")
    build.add_argument("--hardware", default=None,
                       help=f"suggested_hardware flavour (default: {HARDWARE_ONE_MODEL} for one model, "
                            f"{HARDWARE_TWO_MODELS} for two, {HARDWARE_METRIC} for the metric)")
    build.add_argument("--wheel", action="store_true",
                       help="build a wheel of this checkout into the folder and install it from there "
                            "(for versions not on PyPI)")
    build.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    build.set_defaults(func=cmd_space_build)
