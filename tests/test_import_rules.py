"""Import rules of the project, checked from the source with ``ast`` (``tests/import_graph.py``):

- no module imports a private name (``_x``) of another module: a name another module needs is public
  (package, tests, trainers, benchmarks, spaces, dataset scripts);
- no package module reads a private attribute (``module._x``) of another package module;
- the package and the bad-input corpora (``tests/corpus``) have no import circle, not even through an import
  inside a function (such an import hides a circle; it does not remove it);
- the top-level subpackages are layers (:data:`LAYERS`, bottom first): a module imports only from its own layer or
  the layers below it, so no arrow runs back up (the Hub files and the package's front door are the ground floor).
"""

from __future__ import annotations

from pathlib import Path

from import_graph import import_cycles, imported_names, is_private, module_edges, private_reads

ROOT = Path(__file__).resolve().parents[1]

# The package's floors, bottom first; each may import only itself and the floors below it.
LAYERS = ("hub", "utils", "scoring", "judges", "serving", "rewards", "data", "evaluation", "training", "editing",
          "testing", "baselines", "analysis", "diagnostics", "space", "cli")


def layer_of(module: str, root: Path) -> str | None:
    """The floor of a package module: its top-level subpackage, or ``hub`` for the files at the package root."""
    parts = module.split(".")
    if parts[0] != "modeling_miescore":
        return None
    if len(parts) == 1 or not (root / "modeling_miescore" / parts[1]).is_dir():
        return "hub"
    return parts[1]


def back_arrows(root: Path) -> list[str]:
    found = []
    for importer, imported in module_edges(root).items():
        floor = layer_of(importer, root)
        if floor is None:
            continue
        if floor not in LAYERS:
            found.append(f"{importer}: its subpackage '{floor}' is not in LAYERS (give it a floor)")
            continue
        for target in sorted(imported):
            other = layer_of(target, root)
            if other in LAYERS and LAYERS.index(other) > LAYERS.index(floor):
                found.append(f"{importer} ({floor}) imports {target} ({other}), a floor above it")
    return sorted(found)


def private_imports(root: Path) -> list[str]:
    return [f"{i.importer} (line {i.line}): from {i.module} import {i.name}" for i in imported_names(root)
            if is_private(i.name) and i.module != i.importer]


def test_no_module_imports_a_private_name_of_another():
    found = private_imports(ROOT)
    assert not found, "private names imported across modules (make them public):\n" + "\n".join(found)


def test_no_package_module_reads_a_private_attribute_of_another():
    found = private_reads(ROOT)
    assert not found, "private attributes read across modules (make them public):\n" + "\n".join(found)


def test_the_package_and_the_corpora_have_no_import_circle():
    edges = module_edges(ROOT)
    cycles = import_cycles(edges, "modeling_miescore") + import_cycles(edges, "corpus")
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)
def test_no_arrow_runs_back_up_between_the_subpackages():
    found = back_arrows(ROOT)
    assert not found, "imports against the layers (move the code down, or the import up):\n" + "\n".join(found)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_private_import_a_private_read_and_a_circle_are_found(tmp_path):
    root = _write(tmp_path, {
        "modeling_miescore/__init__.py": "__version__ = '0'\n",
        "modeling_miescore/evaluation/__init__.py": "",
        "modeling_miescore/evaluation/report.py": "def render():\n    from .kind import markdown\n_x = 1\n",
        "modeling_miescore/evaluation/kind.py": "from .report import _x\nfrom .. import __version__\n",
        "modeling_miescore/evaluation/reader.py": "from . import report\nprint(report._x)\n",
        "tests/helper.py": "def _helper():\n    pass\n",
        "tests/test_x.py": "from helper import _helper\nfrom modeling_miescore.evaluation.report import render\n",
        "tests/corpus/__init__.py": "",
        "tests/corpus/cases.py": "from .runs import run\n",
        "tests/corpus/runs.py": "def run():\n    from corpus.cases import cases\n",
    })
    assert private_imports(root) == [
        "modeling_miescore.evaluation.kind (line 1): from modeling_miescore.evaluation.report import _x",
        "test_x (line 1): from helper import _helper"]
    assert private_reads(root) == ["modeling_miescore/evaluation/reader.py:2: modeling_miescore.evaluation.report._x"]
    assert import_cycles(module_edges(root), "modeling_miescore.evaluation") == [
        ["modeling_miescore.evaluation.kind", "modeling_miescore.evaluation.report"]]
    assert import_cycles(module_edges(root), "corpus") == [["corpus.cases", "corpus.runs"]]


def test_a_back_arrow_and_an_unknown_subpackage_are_found(tmp_path):
    root = _write(tmp_path, {
        "modeling_miescore/__init__.py": "",
        "modeling_miescore/image_io.py": "X = 1\n",
        "modeling_miescore/utils/__init__.py": "",
        "modeling_miescore/utils/a.py": "from ..data.b import Y\nfrom ..image_io import X\n",
        "modeling_miescore/data/__init__.py": "",
        "modeling_miescore/data/b.py": "from ..utils.a import Y\nY = 2\n",
        "modeling_miescore/attic/__init__.py": "",
        "modeling_miescore/attic/c.py": "from ..image_io import X\n",
    })
    assert back_arrows(root) == [
        "modeling_miescore.attic.c: its subpackage 'attic' is not in LAYERS (give it a floor)",
        "modeling_miescore.attic: its subpackage 'attic' is not in LAYERS (give it a floor)",
        "modeling_miescore.utils.a (utils) imports modeling_miescore.data.b (data), a floor above it"]
