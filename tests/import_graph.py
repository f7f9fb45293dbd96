"""The project's imports, read from the source with ``ast`` (nothing is imported): which module imports which names
from which module, at module level or inside a function. For the import rules (``tests/test_import_rules.py``).

Modules of the project: ``modeling_miescore.*`` (dotted names) and the scripts and test helpers that import each
other by bare name through ``sys.path`` (``tests/*.py``, ``trainers/*.py``, ``benchmarks/*.py``; a package there,
``tests/corpus/``, by dotted name: ``corpus.*``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["ImportedName", "import_cycles", "imported_names", "is_private", "module_edges", "private_reads",
           "project_modules"]

PACKAGE = "modeling_miescore"
SCRIPT_FOLDERS = ("tests", "trainers", "benchmarks", "spaces", "dataset_scripts")


@dataclass(frozen=True)
class ImportedName:
    importer: str  # the importing module
    module: str  # the module imported from
    name: str  # the name imported (a module's attribute, or a submodule)
    line: int


def project_modules(root: Path) -> dict[str, Path]:
    """``{module name: file}``: the package's modules (dotted) and the scripts' modules (bare names)."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    for folder in SCRIPT_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__" and len(parts) > 1:
                parts.pop()
            # importable through sys.path: a file of the folder by bare name, a package's module by dotted name
            importable = len(parts) == 1 or (root / folder / parts[0] / "__init__.py").is_file()
            name = ".".join(parts)
            modules[name if importable and name not in modules else path.relative_to(root).as_posix()] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@lru_cache(maxsize=None)
def _nodes(path: Path) -> tuple:
    """Every node of ``path``'s tree, without the ``if TYPE_CHECKING:`` blocks (imports for annotations only)."""
    def walk(node):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in walk(child))
            return
        yield node
        for child in ast.iter_child_nodes(node):
            yield from walk(child)

    return tuple(walk(_tree(path)))


def _resolve(importer: str, path: Path, node: ast.ImportFrom) -> str | None:
    """The absolute module name ``from ... import`` reads from (None for a relative import outside a package)."""
    if not node.level:
        return node.module
    base = importer.split(".") if _is_package(path) else importer.split(".")[:-1]
    if node.level > 1:
        base = base[:len(base) - node.level + 1]
    if not base or "/" in importer:  # a file no import reaches by name
        return None
    return ".".join([*base, node.module] if node.module else base)


def imported_names(root: Path) -> list[ImportedName]:
    """Every ``from M import name`` of the project whose ``M`` is a project module, anywhere in a file."""
    modules = project_modules(root)
    found = []
    for importer, path in modules.items():
        for node in _nodes(path):
            if isinstance(node, ast.ImportFrom):
                module = _resolve(importer, path, node)
                if module in modules:
                    found += [ImportedName(importer, module, a.name, node.lineno) for a in node.names]
    return found


def module_edges(root: Path) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over the project (``from M import sub`` of a submodule is an edge to
    ``M.sub``; ``import a.b`` an edge to ``a.b``)."""
    modules = project_modules(root)
    edges = {m: set() for m in modules}
    for item in imported_names(root):
        submodule = f"{item.module}.{item.name}"
        edges[item.importer].add(submodule if submodule in modules else item.module)
    for importer, path in modules.items():
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                edges[importer].update(a.name for a in node.names if a.name in modules)
    return edges


def import_cycles(edges: dict[str, set[str]], within: str) -> list[list[str]]:
    """The import circles among the modules whose names start with ``within``: the strongly connected components
    with more than one module (Tarjan), each sorted."""
    nodes = [m for m in edges if m == within or m.startswith(within + ".")]
    inside = set(nodes)
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node] & inside:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    return sorted(cycles)


def private_reads(root: Path, within: str = PACKAGE) -> list[str]:
    """``module._name`` attribute reads, in the modules under ``within``, of a private name of another project
    module bound by ``import a.b as m`` or ``from a import b`` (a submodule)."""
    modules = project_modules(root)
    found = []
    for importer, path in modules.items():
        if not (importer == within or importer.startswith(within + ".")):
            continue
        aliases = {}
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in modules})
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(importer, path, node)
                aliases.update({a.asname or a.name: f"{module}.{a.name}" for a in node.names
                                if f"{module}.{a.name}" in modules})
        for node in _nodes(path):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and is_private(node.attr) and aliases[node.value.id] != importer):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (``__version__``, ``__all__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))
