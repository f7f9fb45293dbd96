"""Reading and checking a raw benchmark release: every problem found, with file and line, before anything is written.

:class:`ProblemCollector` collects every problem (file + line + message) and :class:`DatasetValidationError`
raises them together; :func:`read_jsonl` / :func:`read_csv` keep line numbers; :func:`unique_records` /
:class:`RecordCheck` check each record (ids, text fields, references, images); :class:`ImageChecker` checks that
an image exists, stays inside the raw folder and decodes (truncated files and decompression bombs are caught here,
not on the user's first ``load_dataset``); :func:`link_leaving` refuses a symbolic link whose target leaves the raw
folder unless ``follow_symlinks=True``. Nothing is unpickled: inputs are JSON Lines, CSV and images.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence
from ...hub.errors import MIEScoreInputError
from ...hub.image_io import DEFAULT_MAX_IMAGE_PIXELS, ImageLoadError, load_image, read_image_file
from ...hub.processing_miescore import check_instruction
from ...utils.text_hygiene import control_characters_problem

__all__ = [
    "DatasetValidationError",
    "ImageChecker",
    "ImageRef",
    "Problem",
    "ProblemCollector",
    "RecordCheck",
    "check_image",
    "id_problem",
    "json_members",
    "json_object_entries",
    "line_at",
    "link_leaving",
    "link_problem",
    "read_edited_images",
    "read_csv",
    "read_jsonl",
    "read_text",
    "record_problem",
    "resolve_member",
    "skip_space",
    "unique_records",
]

# How many problems the exception message lists (all of them stay in `.problems`).
_MAX_PROBLEMS_SHOWN = 200
# The problem of a JSON value nested deeper than the parser's recursion limit (no release record is).
TOO_DEEP = "JSON nested too deeply to be a record (arrays or objects thousands of levels deep)"
_LINK_LOOP = "is a symbolic link loop (or a chain of links too long to follow); point it at a real file"


# --------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One problem in a raw release: the file (relative to the raw folder), 1-based line, message."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "message": self.message}


class DatasetValidationError(ValueError):
    """A raw release has problems; ``.problems`` lists every one (file, line, message)."""

    def __init__(self, problems: Sequence[Problem], *, source: str | os.PathLike | None = None):
        self.problems = list(problems)
        self.source = os.fspath(source) if source is not None else None
        super().__init__(self._message())

    def _message(self) -> str:
        n = len(self.problems)
        where = f" in {self.source}" if self.source else ""
        lines = [f"{n} problem{'s' if n != 1 else ''} found{where}; nothing was written:"]
        lines += [f"  - {p}" for p in self.problems[:_MAX_PROBLEMS_SHOWN]]
        if n > _MAX_PROBLEMS_SHOWN:
            lines.append(f"  ... and {n - _MAX_PROBLEMS_SHOWN} more (see DatasetValidationError.problems)")
        return "\n".join(lines)


class ProblemCollector:
    """Accumulates :class:`Problem` s about the raw folder ``root``; :meth:`raise_if_any` raises them all at once.

    ``follow_symlinks=False`` makes the readers refuse raw files that leave ``root`` through a symbolic link
    (:meth:`refuses_link`).
    """

    def __init__(self, root: str | os.PathLike | None = None, *, follow_symlinks: bool = False):
        self.root = Path(root) if root is not None else None
        self.follow_symlinks = follow_symlinks
        self.problems: list[Problem] = []

    def add(self, file: str | os.PathLike, line: int | None, message: str) -> None:
        self.problems.append(Problem(self._relative(file), line, message))

    def _relative(self, file) -> str:
        path = Path(file)
        if self.root is not None and path.is_absolute():
            try:
                return path.relative_to(self.root).as_posix()
            except ValueError:
                return path.as_posix()
        return path.as_posix()

    def __len__(self) -> int:
        return len(self.problems)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise DatasetValidationError(self.problems, source=self.root)

    def readable(self, path: Path) -> bool:
        """Whether the raw file ``path`` may be read: it is a file (else a problem) that no link takes out of the raw
        folder (:meth:`refuses_link`)."""
        if not path.is_file():
            self.add(path.name, None, f"file not found (expected at {path})")
            return False
        return not self.refuses_link(path)

    def refuses_link(self, path: Path) -> bool:
        """True (and a problem reported) when ``path`` is in the raw folder but links outside it and links that
        leave are not followed."""
        if self.follow_symlinks or self.root is None:
            return False
        problem = link_problem(self.root, path)
        if problem is None:
            return False
        self.add(path, None, problem)
        return True


# --------------------------------------------------------------------------------------------
# Readers that keep line numbers
# --------------------------------------------------------------------------------------------


def read_jsonl(path: Path, problems: ProblemCollector, *, required: Sequence[str] = ()) -> list[tuple[int, dict]]:
    """Parse a JSON Lines file into ``[(line_number, object), ...]``.

    Blank lines are skipped. Malformed lines, lines that are not JSON objects and objects missing a
    ``required`` key are reported to ``problems`` (with the line) and left out of the result.
    """
    name = path.name
    if not problems.readable(path):
        return []
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as err:
        problems.add(name, None, f"cannot read file: {err}")
        return []
    out: list[tuple[int, dict]] = []
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()
        except UnicodeDecodeError as err:
            problems.add(name, lineno, f"not valid UTF-8 ({err.reason} at byte {err.start}); save the file as UTF-8")
            continue
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            problems.add(name, lineno, f"malformed JSON: {err.msg} (column {err.colno})")
            continue
        except RecursionError:
            problems.add(name, lineno, TOO_DEEP)
            continue
        problem = record_problem(obj, required, "line")
        if problem:
            problems.add(name, lineno, problem)
            continue
        out.append((lineno, obj))
    return out


def record_problem(obj: Any, required: Sequence[str], unit: str = "record") -> str | None:
    """Why ``obj`` is not a usable JSON record (not an object, or missing a ``required`` key); None when it is."""
    if not isinstance(obj, dict):
        return f"expected a JSON object per {unit}, got {type(obj).__name__}"
    missing = [k for k in required if k not in obj]
    return f"missing key(s) {', '.join(map(repr, missing))}" if missing else None


def read_text(path: Path, problems: ProblemCollector) -> str | None:
    """The UTF-8 text of a raw file, or None and a problem (missing, unreadable, or a link leaving the raw folder)."""
    if not problems.readable(path):
        return None
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        problems.add(path.name, None, f"cannot read the file as UTF-8 text: {err}")
        return None


def line_at(text: str, position: int) -> int:
    """The 1-based line of ``position`` in ``text``."""
    return text.count("\n", 0, position) + 1


def skip_space(text: str, position: int) -> int:
    """The first position at or after ``position`` that is not JSON whitespace."""
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def json_members(text: str, decoder: json.JSONDecoder, what: str) -> Iterator[tuple[int, Any, int]]:
    """``(line, key, start)`` of each member of the top-level JSON object ``text``, in file order (a repeated key
    too, unlike ``json.loads``): ``start`` is where the member's value begins; the value is skipped once the
    consumer asks for the next member. Raises ``json.JSONDecodeError`` (``what`` names the object expected when
    ``text`` is none; text after the object is an error too)."""
    position = skip_space(text, 0)
    if not text.startswith("{", position):
        raise json.JSONDecodeError(f"expected {what}", text, position)
    position = skip_space(text, position + 1)
    while not text.startswith("}", position):
        key, position = decoder.raw_decode(text, position)
        line = line_at(text, position)
        position = skip_space(text, position)
        if not text.startswith(":", position):
            raise json.JSONDecodeError("expected ':' after a key", text, position)
        position = skip_space(text, position + 1)
        yield line, key, position
        _, position = decoder.raw_decode(text, position)
        position = skip_space(text, position)
        if text.startswith(",", position):
            position = skip_space(text, position + 1)
        elif not text.startswith("}", position):
            raise json.JSONDecodeError("expected ',' or '}' after a member", text, position)
    if skip_space(text, position + 1) != len(text):
        raise json.JSONDecodeError("extra data after the object", text, skip_space(text, position + 1))


def json_object_entries(text: str, what: str) -> Iterator[tuple[int, Any, Any]]:
    """``(line, key, value)`` of each member of the top-level JSON object ``text`` (:func:`json_members`)."""
    decoder = json.JSONDecoder()
    for line, key, start in json_members(text, decoder, what):
        yield line, key, decoder.raw_decode(text, start)[0]


def read_csv(path: Path, problems: ProblemCollector, *, required: Sequence[str],
             delimiter: str = ",") -> list[tuple[int, dict[str, str]]] | None:
    """Parse a CSV file (a TSV file with ``delimiter="\\t"``) with a header into ``[(line_number, {column: text})]``.

    A missing or unreadable file, or missing required columns, is reported (line 1 for the header)
    and gives ``None`` (so that callers can skip checks that would only repeat the problem); rows with
    too few or too many fields are reported and skipped.
    """
    name = path.name
    if not problems.readable(path):
        return None
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as fh:
            return _csv_rows(csv.reader(fh, delimiter=delimiter), name, problems, required)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        problems.add(name, None, f"cannot read CSV: {err}")
        return None


def _csv_rows(reader, name: str, problems: ProblemCollector, required: Sequence[str]):
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        problems.add(name, 1, f"empty file; expected a header with column(s) {', '.join(required)}")
        return None
    missing = [c for c in required if c not in header]
    if missing:
        problems.add(name, 1, f"missing column(s) {', '.join(map(repr, missing))} "
                              f"(header has {', '.join(map(repr, header))})")
        return None
    rows: list[tuple[int, dict[str, str]]] = []
    prev_line = reader.line_num
    for fields in reader:
        lineno = prev_line + 1  # a quoted field may span lines: the row starts after the previous one
        prev_line = reader.line_num
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            problems.add(name, lineno, f"expected {len(header)} fields, found {len(fields)}")
            continue
        rows.append((lineno, {h: f.strip() for h, f in zip(header, fields)}))
    return rows


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def id_problem(value: Any, id_key: str) -> str | None:
    """Why ``value`` cannot be a record id (``id_key`` names the field), or None: a non-empty string without a NUL
    byte (a NUL cannot be in a file name, and ends C strings early)."""
    if not _nonempty_str(value):
        return f"{id_key} must be a non-empty string, got {value!r}"
    if "\x00" in value:
        return f"{id_key} {value!r} contains a NUL byte"
    return None


def unique_records(entries: Iterable[tuple[int, dict]], problems: ProblemCollector, file: str, id_key: str,
                   declared: set[str]) -> Iterator[tuple[int, dict, str]]:
    """``(line, record, id)`` for each record whose ``id_key`` is a non-empty string seen for the first time.

    Every well-formed id goes into ``declared`` (also those of records that fail other checks, so that
    references to them are not reported a second time as unknown); a repeated id is reported with the
    line of its first occurrence.
    """
    first_line: dict[str, int] = {}
    for line, obj in entries:
        record_id = obj[id_key]
        problem = id_problem(record_id, id_key)
        if problem:
            problems.add(file, line, problem)
            continue
        declared.add(record_id)
        if record_id in first_line:
            problems.add(file, line, f"duplicate {id_key} {record_id!r} (first on line {first_line[record_id]})")
            continue
        first_line[record_id] = line
        yield line, obj, record_id


class RecordCheck:
    """The checks on one record (``file:line``): each failed check adds a problem and clears :attr:`ok`."""

    def __init__(self, problems: ProblemCollector, file: str, line: int, images: "ImageChecker | None" = None):
        self.problems, self.file, self.line, self.images = problems, file, line, images
        self.ok = True

    def fail(self, message: str) -> None:
        self.problems.add(self.file, self.line, message)
        self.ok = False

    def text(self, value: Any, message: str) -> str | None:
        """``value`` when it is a non-empty string, else ``None`` and the problem ``message``."""
        if _nonempty_str(value):
            return value
        self.fail(message)
        return None

    def record_id(self, value: Any, id_key: str) -> str | None:
        """``value`` when it can be a record id (:func:`id_problem`), else ``None`` and the problem."""
        problem = id_problem(value, id_key)
        if problem:
            self.fail(problem)
            return None
        return value

    def instruction(self, value: Any, what: str) -> str | None:
        """``value`` when it is an instruction every scorer takes (a non-empty string of at most
        ``MAX_INSTRUCTION_CHARS``, no chat-control token: ``processing_miescore.check_instruction``; no control
        character such as NUL: ``utils.text_hygiene.control_characters_problem``), else
        ``None`` and a problem naming ``what`` (e.g. ``"instance 'x'"``)."""
        text = self.text(value, f"{what}: instruction must be a non-empty string")
        if text is None:
            return None
        problem = control_characters_problem(text, f"{what}: the instruction")
        if problem:
            self.fail(problem)
            return None
        try:
            check_instruction(text, where=what)
        except MIEScoreInputError as err:
            self.fail(str(err))
            return None
        return text

    def choice(self, table: dict, value: Any, field: str, key: Any = None) -> Any:
        """``table[key]`` (``key``: ``value`` unless given), else None and a problem naming ``field``, ``value`` and
        the allowed values."""
        found = table.get(value if key is None else key)
        if found is None:
            self.fail(f"{field} {value!r} is not one of {', '.join(table)}")
        return found

    def known(self, value: Any, declared: set[str], message: str) -> None:
        """``value`` must be one of the ``declared`` ids (of another raw file)."""
        if not isinstance(value, str) or value not in declared:
            self.fail(message)

    def image(self, rel: Any, label: str) -> "ImageRef | None":
        """The image file ``rel`` of the release when it is readable, else ``None`` and ``"<label>: <reason>"``."""
        path, err = self.images(rel)
        if err:
            self.fail(f"{label}: {err}")
            return None
        return ImageRef(rel=str(rel).replace("\\", "/"), path=path)


def read_edited_images(path: Path, problems: ProblemCollector, images: "ImageChecker", *, id_key: str, what: str,
                       parent_key: str, parent_file: str, declared_parents: set[str], bar):
    """Records of edited images (MIE-Bench ``edits.jsonl``, MER-Bench ``candidates.jsonl``), each checked.

    Every record has ``id_key``, ``parent_key`` (the instance or sample it edits, declared in ``parent_file``),
    ``editing_model`` and ``image``. Returns ``([(line, id, parent_id, editing_model, ImageRef), ...],
    declared ids)`` for the good records; ``what`` names a record in the messages (``"edit"``).
    """
    file = path.name
    entries = read_jsonl(path, problems, required=(id_key, parent_key, "editing_model", "image"))
    declared: set[str] = set()
    out = []
    for line, obj, record_id in unique_records(bar(entries, desc=f"checking {what}s"), problems, file, id_key,
                                               declared):
        check = RecordCheck(problems, file, line, images)
        parent = obj[parent_key]
        check.known(parent, declared_parents,
                    f"{what} {record_id!r} points to unknown {parent_key} {parent!r} (not in {parent_file})")
        model = check.text(obj["editing_model"], f"{what} {record_id!r}: editing_model must be a non-empty string")
        image = check.image(obj["image"], f"{what} {record_id!r}")
        if check.ok:
            out.append((line, record_id, parent, model.strip(), image))
    return out, declared


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageRef:
    """An image of a raw release: a file (``path`` + ``rel``, read when the row is written) or embedded ``data``."""

    rel: str  # the name written into the dataset (``Image`` storage ``path``): relative path or a stable name
    path: Path | None = None
    data: bytes | None = None

    def struct(self) -> dict:
        """The ``datasets.Image`` storage value: the original bytes (no re-encoding; a regular file of a bounded
        size, :func:`~modeling_miescore.hub.image_io.read_image_file`) and the name."""
        return {"bytes": self.data if self.data is not None else read_image_file(self.path), "path": self.rel}

    def size(self) -> int:
        """Bytes (for shard-size estimates; 0 when the file cannot be read)."""
        if self.data is not None:
            return len(self.data)
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    @staticmethod
    def embedded(data: bytes, name: str | None, fallback: str) -> "ImageRef":
        """An embedded image; ``name`` (the release's own file name) or ``fallback`` + a short content hash."""
        return ImageRef(rel=str(name) if name else f"{fallback}-{hashlib.sha1(data).hexdigest()[:10]}", data=data)


def resolve_member(root: Path, rel: Any) -> tuple[Path | None, str | None]:
    """Resolve a relative path given in a raw file; refuse absolute paths and escapes from ``root``."""
    if not isinstance(rel, str) or not rel.strip():
        return None, f"image path must be a non-empty string, got {rel!r}"
    if "\x00" in rel:
        return None, f"image path {rel!r} contains a NUL byte; no file has such a name"
    if os.path.isabs(rel) or re.match(r"^[A-Za-z]:[\\/]", rel):
        return None, f"image path {rel!r} is absolute; give it relative to the raw folder"
    norm = os.path.normpath(rel.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return None, f"image path {rel!r} points outside the raw folder"
    # Lexical check only; symbolic links are checked by ImageChecker (link_leaving).
    return root / norm, None


def link_leaving(root: Path, path: Path) -> Path | None:
    """Where ``path`` really is, when it lies (by name) inside ``root`` but a symbolic link takes it outside;
    ``None`` when it stays inside (or is not inside ``root`` by name at all)."""
    root_abs = Path(os.path.abspath(root))
    path_abs = Path(os.path.abspath(path))
    if not path_abs.is_relative_to(root_abs):
        return None
    target = path_abs.resolve()
    return None if target.is_relative_to(root_abs.resolve()) else target


def link_problem(root: Path, path: Path) -> str | None:
    """Why ``path`` (inside ``root`` by name) must not be read through its links: a link leaving ``root``, or a
    link loop; None when it is fine."""
    try:
        target = link_leaving(root, path)
    except (OSError, RuntimeError):  # RuntimeError: Path.resolve's "Symlink loop" before Python 3.13
        return _LINK_LOOP
    return None if target is None else _outside_link(target)


def _outside_link(target: Path) -> str:
    return (f"leads through a symbolic link to {target}, outside the raw folder; copy the file into the raw folder, "
            "or pass follow_symlinks=True to read files that links lead to")


def check_image(path: Path, rel: str, max_image_pixels: int | None = None) -> str | None:
    """Return ``None`` when ``path`` is a decodable image, else a one-line reason naming ``rel``."""
    if not path.exists():
        if path.is_symlink():
            return f"image path {rel!r} {_LINK_LOOP if _is_loop(path) else 'is a broken symbolic link'}"
        return f"image file not found: {rel!r}"
    if not path.is_file():
        return f"image path {rel!r} is not a file"
    try:
        load_image(path, max_image_pixels=max_image_pixels or DEFAULT_MAX_IMAGE_PIXELS)
    except ImageLoadError as err:
        return f"unreadable image {rel!r}: {err}"
    except Exception as err:  # noqa: BLE001 - any decoder failure is a data problem
        return f"unreadable image {rel!r}: {type(err).__name__}: {err}"
    return None


def _is_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as err:
        return err.errno == errno.ELOOP
    return False


class ImageChecker:
    """Memoised :func:`check_image` (a source photo is often shared by several instances).

    With ``follow_symlinks=False`` an image whose symbolic link (or a linked folder on its path) leads outside
    the raw folder is refused.
    """

    def __init__(self, root: Path, max_image_pixels: int | None = None, *, follow_symlinks: bool = False):
        self.root = root
        self.max_image_pixels = max_image_pixels
        self.follow_symlinks = follow_symlinks
        self._cache: dict[str, tuple[Path | None, str | None]] = {}

    def __call__(self, rel: Any) -> tuple[Path | None, str | None]:
        key = rel if isinstance(rel, str) else repr(rel)
        if key not in self._cache:
            path, err = resolve_member(self.root, rel)
            if err is None and not self.follow_symlinks and (problem := link_problem(self.root, path)) is not None:
                err = f"image path {rel!r} {problem}"
            if err is None:
                err = check_image(path, rel, self.max_image_pixels)
            self._cache[key] = (path, err)
        return self._cache[key]

    def __len__(self) -> int:
        return len(self._cache)


