#!/usr/bin/env python
"""Build a Hub-native Parquet dataset (MIE-Bench or MER-Bench) from its raw release.

    python dataset_scripts/build_dataset.py mie-bench --raw RAW_DIR --out OUT_DIR [--overwrite] [--push-to-hub USER/NAME]
    python dataset_scripts/build_dataset.py mer-bench --raw RAW_DIR --out OUT_DIR [--seed 0] ...

Same as `miescore build-dataset <name> ...`, for a source checkout without `pip install -e .`. This is not a
`datasets` loading script (datasets 5 runs none): it writes Parquet shards + README.md, which
`datasets.load_dataset(OUT_DIR)` reads directly. The builders live in `modeling_miescore.data.builders`.
"""

import argparse
import sys
from pathlib import Path

try:
    from modeling_miescore.cli.dataset import add_builder_subcommands
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from modeling_miescore.cli.dataset import add_builder_subcommands


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="build_dataset.py", description=__doc__.strip().splitlines()[0])
    add_builder_subcommands(parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
