"""A report's protocol: every setting that decides its numbers, in ``report.json`` under ``protocol``, with
``protocol.fingerprint`` = the sha256 of a canonical form of those settings: same inputs and settings, same
fingerprint; any changed setting, another fingerprint. Which setting groups each report kind records is declared
once, in :data:`PROTOCOL_GROUPS`.

Paths, creation times, endpoints' credentials and the editor's outputs are never part of it: the editor is what a
comparison compares (:func:`differences` ignores it), the rest does not decide a number.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["PROTOCOL_GROUPS", "canonical", "differences", "fingerprint", "flatten", "folder_sha256", "make_protocol",
           "file_sha256", "package_version", "protocol_header", "prompts_setting", "scores_protocol", "weights_sha256",
           "with_protocol_header"]

_EDITOR_RUN = ("dataset", "judge", "request", "prompts", "aggregation", "package")
# The setting groups of each report kind's protocol (every group is required, no other is allowed).
PROTOCOL_GROUPS = {
    "gedit": _EDITOR_RUN,
    "imgedit": _EDITOR_RUN,
    "editors": ("runs", "comparison", "package"),
    "mie-bench": ("dataset", "judge", "aggregation", "package"),
    "mer-bench": ("dataset", "judge", "aggregation", "package"),
    "editing-models": ("dataset", "judge", "aggregation", "package"),
    "reward": ("dataset", "judge", "aggregation", "package"),
    "zero-shot": ("dataset", "judge", "aggregation", "package"),
}
# keys of the protocol that are not settings (the fingerprint and what is derived from the settings)
_DERIVED = ("fingerprint", "differs_from_released", "kind")
_CREDENTIAL = re.compile(r"(^|[._])(api_?key|api_key_env|access_token|auth_token|password|secret|authorization)"
                         r"($|[._])", re.IGNORECASE)
_HASH_LIMIT = 64 << 30  # bytes hashed at most per folder (a bound, far above any benchmark release)


def package_version() -> str:
    """The installed MIEScore version ("" when it is not installed as a distribution)."""
    try:
        from importlib.metadata import version

        return version("miescore")
    except Exception:  # noqa: BLE001 - informational only
        return ""


def canonical(settings: dict) -> str:
    """The canonical text of ``settings``: sorted keys, no whitespace."""
    return json.dumps(settings, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def fingerprint(settings: dict) -> str:
    """sha256 of :func:`canonical` of ``settings`` without the derived keys (``fingerprint`` itself...)."""
    kept = {k: v for k, v in settings.items() if k not in _DERIVED}
    return hashlib.sha256(canonical(kept).encode()).hexdigest()


def flatten(tree, prefix: str = "", *, lists: bool = False) -> dict:
    """``{"a.b": leaf}`` of a nested dict (with ``lists``, list items too: ``"a.b[0]"``); an empty one is a leaf."""
    if isinstance(tree, dict) and tree:
        items = ((f"{prefix}.{key}" if prefix else str(key), value) for key, value in tree.items())
    elif lists and isinstance(tree, list) and tree:
        items = ((f"{prefix}[{i}]", value) for i, value in enumerate(tree))
    else:
        return {prefix: tree}
    out = {}
    for path, value in items:
        out.update(flatten(value, path, lists=lists))
    return out


def _check_no_credentials(settings: dict) -> None:
    for path in flatten(settings):
        if _CREDENTIAL.search(path):
            raise ValueError(f"protocol setting {path!r} looks like a credential; credentials are never recorded")


def make_protocol(kind: str, settings: dict, released: Optional[dict] = None) -> dict:
    """``report["protocol"]``: ``settings`` (exactly the groups :data:`PROTOCOL_GROUPS` declares for ``kind``),
    ``fingerprint`` and ``differs_from_released`` (:func:`differences` against the ``released`` protocol's
    settings, given as a partial settings tree: only its settings are compared)."""
    wanted = PROTOCOL_GROUPS[kind]
    if set(settings) != set(wanted):
        raise ValueError(f"a {kind} protocol records {', '.join(wanted)}; got {', '.join(sorted(settings))}")
    _check_no_credentials(settings)
    json.loads(canonical(settings))  # a setting that is not plain JSON fails here, not in a later comparison
    out = {**settings, "kind": kind, "fingerprint": fingerprint(settings)}
    out["differs_from_released"] = differences(settings, released, names=("this run", "released")) if released else []
    return out


def _shown(value) -> str:
    return "not set" if value is None else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def differences(a: dict, b: dict, *, ignore: Iterable[str] = (), names=("a", "b")) -> list[str]:
    """``"group.setting: A (B)"`` for each setting whose value differs between the protocols ``a`` and ``b``
    (``names`` label the two sides); settings under a path of ``ignore`` (e.g. ``editor``) and the derived keys
    are not compared. With ``names[1] == "released"`` only the settings ``b`` declares are compared."""
    ignored = tuple(ignore) + _DERIVED
    flat_a, flat_b = flatten(a), flatten(b)
    keys = flat_b if names[1] == "released" else {**flat_a, **flat_b}
    out = []
    for key in sorted(keys):
        if key.split(".")[0] in ignored or any(key == i or key.startswith(i + ".") for i in ignored):
            continue
        if flat_a.get(key) != flat_b.get(key):
            out.append(f"{key}: {_shown(flat_a.get(key))} ({names[1]}: {_shown(flat_b.get(key))})")
    return out


def protocol_header(protocol: Optional[dict]) -> list[str]:
    """The Markdown lines that head ``report.md`` / ``report.html``: the fingerprint, the settings that differ
    from the released protocol, and the protocol differences a comparison was allowed to have."""
    if not protocol:
        return []
    out = [f"**Protocol fingerprint:** `{protocol['fingerprint']}` (every setting that decides these numbers: "
           "report.json, `protocol`)", ""]
    released = protocol.get("differs_from_released") or []
    if released:
        out += ["**Differs from the released protocol:**", "", *[f"- {line}" for line in released], ""]
    elif protocol["kind"] in ("gedit", "imgedit"):
        out += ["**Differs from the released protocol:** nothing", ""]
    allowed = (protocol.get("comparison") or {}).get("allowed_differences") or {}
    if allowed:
        out += ["**Compared despite protocol differences (--allow-protocol-differences):**", ""]
        out += [f"- {run}: {'; '.join(lines)}" for run, lines in allowed.items()] + [""]
    return out


def with_protocol_header(markdown: str, protocol: Optional[dict]) -> str:
    """``markdown`` with :func:`protocol_header` below its title (``# ...`` line)."""
    header = protocol_header(protocol)
    if not header:
        return markdown
    title, sep, rest = markdown.partition("\n\n") if markdown.startswith("# ") else ("", "", markdown)
    return "\n".join([title, "", *header, rest] if sep else [*header, rest])


def _update(digest, path: Path, total: int = 0) -> int:
    """Feed ``path`` to ``digest`` in 1 MiB blocks; ``total``: bytes fed before (bounded by the hash limit)."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            total += len(block)
            if total > _HASH_LIMIT:
                raise ValueError(f"more than {_HASH_LIMIT >> 30} GiB to hash at '{path}'")
            digest.update(block)
    return total


def file_sha256(path) -> str:
    """The sha256 of one file, read in blocks."""
    digest = hashlib.sha256()
    _update(digest, Path(path))
    return digest.hexdigest()


def _sha256_files(files: list[Path], root: Path) -> str:
    digest, total = hashlib.sha256(), 0
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        total = _update(digest, path, total)
    return digest.hexdigest()


def folder_sha256(folder, suffixes: tuple[str, ...]) -> Optional[str]:
    """sha256 over the files of ``folder`` (recursively, never following a link) whose name ends with one of
    ``suffixes``, each with its relative path, in sorted order; None when ``folder`` is not a local folder (a Hub
    id) or holds no such file."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        return None
    files = sorted(p for p in root.rglob("*") if p.name.endswith(suffixes) and p.is_file() and not p.is_symlink()
                   and not any(part.is_symlink() for part in p.relative_to(root).parents if str(part) != "."))
    return _sha256_files(files, root) if files else None


def weights_sha256(checkpoint) -> Optional[str]:
    """The hash of a local checkpoint's weights (``*.safetensors``); None for a Hub id."""
    return folder_sha256(checkpoint, (".safetensors",))


def scores_protocol(kind: str, *, datasets: list, predictions: list, model: Optional[str],
                    aggregation: dict) -> dict:
    """``report["protocol"]`` of an evaluator benchmark (``miescore benchmark mie-bench`` ..., the reward and
    zero-shot tables): ``datasets`` ``[{"dataset": path or Hub id, "split", "keys"}]``, the ``predictions`` files
    scored (their hashes: the judgements the numbers come from), the ``model`` that made them (its weights' hash)
    and the ``aggregation`` settings."""
    data = []
    for entry in datasets:
        if entry["dataset"] is None:  # the predictions alone (they carry what is ranked)
            continue
        local = Path(entry["dataset"]).expanduser()
        data.append({"name": local.name if local.exists() else entry["dataset"],
                     "data_sha256": folder_sha256(local, (".parquet", ".arrow")),
                     "split": entry.get("split"), "keys": entry.get("keys")})
    judge = {"model": Path(model).name if model else None, "weights_sha256": weights_sha256(model) if model else None,
             "predictions_sha256": [file_sha256(p) if Path(p).is_file() else None for p in predictions]}
    return make_protocol(kind, {"dataset": data, "judge": judge, "aggregation": aggregation,
                                "package": {"miescore": package_version()}})


def prompts_setting(prompts) -> dict:
    """``{"source", "sha256"}`` of a prompt set: the user's copy of the benchmark's file (its hash) or our own
    wording (``own prompts``, the hash of our wording); the file's name is not part of it."""
    found = re.search(r"sha256 ([0-9a-f]+)", prompts.label or "")
    return {"source": "the benchmark's own (the user's copy)" if prompts.comparable else "own prompts",
            "sha256": found.group(1) if found else prompts.label}
