"""The house in figures: lines and modules of the package, imports of its own modules inside functions, back
arrows between its subpackages and import circles (the import rules of ``tests/test_import_rules.py``).

    python benchmarks/house_figures.py [--list-local-imports]

Lines are physical lines of ``.py`` files (as ``wc -l``); "outside tests" counts ``.py`` and ``.sh`` files that git
tracks outside ``tests/``.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the import graph and the layer rule live with the tests

from import_graph import import_cycles, module_edges  # noqa: E402
from test_import_rules import back_arrows  # noqa: E402


def lines(paths) -> int:
    return sum(len(Path(p).read_text(encoding="utf-8").splitlines()) for p in paths)


def local_imports(package: Path) -> list[str]:
    """``file:line: statement`` of each import of the package's own modules inside a function body."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                own = (isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(package.name))
                       or isinstance(node, ast.Import) and any(a.name.startswith(package.name) for a in node.names))
                if own:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list-local-imports", action="store_true", help="print each import inside a function")
    args = parser.parse_args()
    package = ROOT / "modeling_miescore"
    modules = sorted(package.rglob("*.py"))
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    outside = [ROOT / f for f in tracked if not f.startswith("tests/") and f.endswith((".py", ".sh"))]
    local = local_imports(package)
    edges = module_edges(ROOT)
    print(f"package lines           {lines(modules):>7,}  ({len(modules)} modules)")
    print(f"lines outside tests/    {lines(p for p in outside if p.is_file()):>7,}")
    print(f"testing/ lines          {lines(sorted((package / 'testing').rglob('*.py'))):>7,}")
    print(f"editor_rl modules       {len(list((package / 'training' / 'editor_rl').glob('*.py'))):>7}")
    print(f"imports inside functions{len(local):>7}  (of the package's own modules)")
    print(f"back arrows             {len(back_arrows(ROOT)):>7}  (between the subpackages' floors)")
    print(f"import circles          {len(import_cycles(edges, 'modeling_miescore')):>7}")
    if args.list_local_imports:
        print("\n".join(local))


if __name__ == "__main__":
    main()
