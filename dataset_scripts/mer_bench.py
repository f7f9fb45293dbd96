#!/usr/bin/env python
"""Build the MER-Bench Parquet dataset from a raw release.

    python dataset_scripts/mer_bench.py --raw RAW_DIR --out OUT_DIR [--overwrite] [--push-to-hub USER/NAME]

Same as `miescore build-dataset mer-bench ...`. The logic (raw layout, validation, card) lives in
`modeling_miescore.data.builders.mer_bench`; see its docstring or `--help`.
"""

import argparse
import sys
from pathlib import Path

try:
    from modeling_miescore.data.builders.mer_bench import add_cli_arguments, run_cli
except ImportError:  # running from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from modeling_miescore.data.builders.mer_bench import add_cli_arguments, run_cli


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    add_cli_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
