"""Import rules of the project, checked from the source with ``ast`` (``tests/import_graph.py``):

- no module imports a private name (``_x``) of another module: a name another module needs is public
  (package, tests, trainers, benchmarks, spaces, dataset scripts);
- no package module reads a private attribute (``module._x``) of another package module;
- the report layer (``modeling_miescore.evaluation``: every report kind, their parts, plots and writers) has no
  import circle: the report kinds build on ``evaluation.report_parts`` and ``evaluation.report`` dispatches on
  declarations, so no report module imports back the modules that import it;
- neither do the offline helpers (``modeling_miescore.testing``) nor the bad-input corpora (``tests/corpus``).
"""

from __future__ import annotations

from pathlib import Path

from import_graph import import_cycles, imported_names, is_private, module_edges, private_reads

ROOT = Path(__file__).resolve().parents[1]


def private_imports(root: Path) -> list[str]:
    return [f"{i.importer} (line {i.line}): from {i.module} import {i.name}" for i in imported_names(root)
            if is_private(i.name) and i.module != i.importer]


def test_no_module_imports_a_private_name_of_another():
    found = private_imports(ROOT)
    assert not found, "private names imported across modules (make them public):\n" + "\n".join(found)


def test_no_package_module_reads_a_private_attribute_of_another():
    found = private_reads(ROOT)
    assert not found, "private attributes read across modules (make them public):\n" + "\n".join(found)


def test_the_report_layer_has_no_import_circle():
    cycles = import_cycles(module_edges(ROOT), "modeling_miescore.evaluation")
    assert not cycles, "import circles in the report layer:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_offline_helpers_and_the_corpora_have_no_import_circle():
    edges = module_edges(ROOT)
    cycles = import_cycles(edges, "modeling_miescore.testing") + import_cycles(edges, "corpus")
    assert not cycles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


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
