"""Jupyter notebooks (nbformat 4.x): parse, join the Python code cells, map positions back,
and write fixes into the cells they touch. Pure: text in, values out, no I/O.

**Joining.** The code cells of a Python notebook are joined, in document order, into one
module text (one `\\n` between cells), so every analysis sees the whole notebook: a scaler
fitted in cell 3 and the split in cell 5 are one data flow. IPython syntax (`%line` magics,
`!shell`, `x = !cmd`, `%%time`-style cell magics, `?`/`??` help, automagic `pip install`,
one-line `get_ipython()` calls) becomes a *neutral* line, its indentation plus `pass` (a
blank line for the continuation lines of a `!cmd` that ends in a backslash), so
the module has exactly the lines of the cells and every column maps unchanged. Code cells
that are not Python (a `%%bash`/`%%html`/... cell magic, or a cell whose VS Code
`languageId` is another language) are left out, like markdown and raw cells. A notebook
whose kernel language is not Python has no Python cells at all.

**Positions.** `Joined.to_cell(Position)` gives the cell (1-based index among *all* cells of
the notebook, as ruff's `cell`), the 0-based line inside it and the same column.

**Writing.** Fixes are applied cell by cell on the original cell texts (an edit that spans
two cells, or that would rewrite a neutralised magic line, drops its fix). The notebook is
written back by splicing: only the JSON value of each changed cell's `source` is replaced,
rendered the way it was stored (a list of lines or one string, its indentation, ASCII
escaping, line endings). Everything else, outputs, metadata, key order, indentation, the
trailing newline, stays byte-identical, and a notebook without edits is returned unchanged.

Malformed input never raises: `parse_notebook` returns a `NotebookError` with the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from torch_preflight.core.diagnostics import Edit, Fix, apply_edits
from torch_preflight.core.source import Position, SourceText, Span

NOTEBOOK_SUFFIX = ".ipynb"

# Cell magics whose body is Python (the magic line is neutralised, the body analysed).
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "prun", "debug", "python", "python3", "ipython", "memit", "mprun", "cache", "tensorflow_version"}
)
PYTHON_LANGUAGES = frozenset({"python", "python3", "ipython", "ipython3", "py"})


def is_notebook_path(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NotebookError:
    """Why a file is not a notebook we can read."""

    message: str


@dataclass(frozen=True)
class SourceValue:
    """Where a cell's `source` value sits in the raw JSON text."""

    start: int  # offset of `[` or of the opening quote
    end: int  # offset just past `]` or the closing quote
    is_list: bool
    literals: tuple[tuple[int, int], ...]  # each JSON string (quotes included), in order
    key_indent: str  # the whitespace before the `"source"` key on its line


@dataclass(frozen=True)
class Cell:
    index: int  # 0-based among all cells
    cell_type: str
    text: str
    value: SourceValue | None  # None: the cell has no `source` (tolerated, never edited)
    language: str | None = None  # metadata.vscode.languageId, when given

    @property
    def number(self) -> int:
        """1-based index among all cells (ruff's `cell`)."""
        return self.index + 1


@dataclass(frozen=True)
class JsonStyle:
    indent: str  # one indentation step ('' for a one-line notebook)
    ensure_ascii: bool
    newline: str


@dataclass(frozen=True)
class Notebook:
    raw: str
    cells: tuple[Cell, ...]
    nbformat_minor: int
    language: str | None  # the kernel's language, lower-case, when the metadata says
    style: JsonStyle

    @property
    def is_python(self) -> bool:
        return self.language is None or self.language in PYTHON_LANGUAGES


# -- parsing ---------------------------------------------------------------------------------


def parse_notebook(raw: str) -> Notebook | NotebookError:
    """Read an .ipynb text. Never raises: a malformed notebook is a `NotebookError`."""
    try:
        return _parse(raw)
    except RecursionError:
        return NotebookError("not a Jupyter notebook: JSON nested too deeply")
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # pragma: no cover - the checks below come first
        return NotebookError(f"not a Jupyter notebook: {exc}")


def _parse(raw: str) -> Notebook | NotebookError:
    text = raw[1:] if raw.startswith("\ufeff") else raw
    if not text.strip():
        return NotebookError("not a Jupyter notebook: the file is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return NotebookError(f"not a Jupyter notebook: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
    if not isinstance(data, dict):
        return NotebookError(f"not a Jupyter notebook: the top-level JSON value is {_kind(data)}, not an object")
    major = data.get("nbformat")
    if major is None:
        return NotebookError('not a Jupyter notebook: no "nbformat" field')
    if not isinstance(major, int) or isinstance(major, bool):
        return NotebookError(f'not a Jupyter notebook: "nbformat" is {_kind(major)}, not an integer')
    if major != 4:
        hint = " (upgrade it with `jupyter nbconvert --to notebook --inplace`)" if major < 4 else ""
        return NotebookError(f"unsupported notebook format: nbformat {major}; only nbformat 4 is supported{hint}")
    minor = data.get("nbformat_minor", 0)
    if not isinstance(minor, int) or isinstance(minor, bool):
        minor = 0
    cells = data.get("cells")
    if not isinstance(cells, list):
        return NotebookError('not a Jupyter notebook: "cells" is missing or not a list')
    metadata = data.get("metadata", {})
    if not isinstance(metadata, dict):
        return NotebookError('not a Jupyter notebook: "metadata" is not an object')
    values = _SourceLocator(text).locate()
    offset = len(raw) - len(text)
    parsed: list[Cell] = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            return NotebookError(f"malformed notebook: cell {i + 1} is {_kind(cell)}, not an object")
        cell_type = cell.get("cell_type")
        if not isinstance(cell_type, str):
            return NotebookError(f'malformed notebook: cell {i + 1} has no "cell_type"')
        source = cell.get("source", "")
        if isinstance(source, list):
            if not all(isinstance(part, str) for part in source):
                return NotebookError(f'malformed notebook: cell {i + 1}: "source" is a list with non-string items')
            body = "".join(source)
        elif isinstance(source, str):
            body = source
        else:
            return NotebookError(f'malformed notebook: cell {i + 1}: "source" is {_kind(source)}, not a string or a list of strings')
        value = values.get(i) if "source" in cell else None
        if value is not None and offset:
            value = _shift(value, offset)
        cell_meta = cell.get("metadata")
        language = None
        if isinstance(cell_meta, dict) and isinstance(cell_meta.get("vscode"), dict):
            lang = cell_meta["vscode"].get("languageId")
            language = lang.lower() if isinstance(lang, str) else None
        parsed.append(Cell(i, cell_type, body, value, language))
    return Notebook(raw, tuple(parsed), minor, _language(metadata), _style(raw))


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _language(metadata: dict[str, object]) -> str | None:
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        section = metadata.get(key)
        if isinstance(section, dict):
            value = section.get(field_name)
            if isinstance(value, str) and value.strip():
                return value.strip().lower()
    return None


def _style(raw: str) -> JsonStyle:
    match = re.search(r"\n([ \t]+)\S", raw)
    indent = match.group(1) if match else ""
    if raw.isascii():
        ensure_ascii = bool(re.search(r"\\u(?:00[89a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F]{2})[0-9a-fA-F]", raw))
    else:
        ensure_ascii = False
    crlf = raw.count("\r\n")
    newline = "\r\n" if crlf and crlf * 2 >= raw.count("\n") else "\n"
    return JsonStyle(indent, ensure_ascii, newline)


def _shift(value: SourceValue, by: int) -> SourceValue:
    return SourceValue(value.start + by, value.end + by, value.is_list, tuple((a + by, b + by) for a, b in value.literals), value.key_indent)


_WS = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")


class _SourceLocator:
    """Finds the raw span of each `cells[i].source` in text that `json.loads` accepted.

    Other values are skipped (strings through the C string scanner), so large outputs cost
    little. Duplicate keys resolve to the last one, as `json.loads` does."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.key_start = 0  # where the key being read starts

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def string(self) -> str:
        value, self.pos = json.decoder.scanstring(self.text, self.pos + 1)  # type: ignore[attr-defined]
        return str(value)

    def skip(self) -> None:
        ch = self.text[self.pos]
        if ch == '"':
            self.string()
        elif ch == "{":
            self.pos += 1
            self.members(lambda key: self.skip())
        elif ch == "[":
            self.pos += 1
            self.items(lambda index: self.skip())
        else:
            self.pos = _SCALAR.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def members(self, on_value: object) -> None:
        self.ws()
        if self.text[self.pos] == "}":
            self.pos += 1
            return
        while True:
            self.ws()
            self.key_start = self.pos
            key = self.string()
            self.ws()
            self.pos += 1  # ':'
            self.ws()
            on_value(key)  # type: ignore[operator]
            self.ws()
            if self.text[self.pos] == ",":
                self.pos += 1
                continue
            self.pos += 1  # '}'
            return

    def items(self, on_item: object) -> None:
        self.ws()
        if self.text[self.pos] == "]":
            self.pos += 1
            return
        index = 0
        while True:
            self.ws()
            on_item(index)  # type: ignore[operator]
            index += 1
            self.ws()
            if self.text[self.pos] == ",":
                self.pos += 1
                continue
            self.pos += 1  # ']'
            return

    def locate(self) -> dict[int, SourceValue]:
        found: dict[int, SourceValue] = {}
        self.ws()
        if self.pos >= len(self.text) or self.text[self.pos] != "{":
            return found
        self.pos += 1

        def top(key: str) -> None:
            if key != "cells" or self.text[self.pos] != "[":
                self.skip()
                return
            found.clear()
            self.pos += 1
            self.items(cell)

        def cell(index: int) -> None:
            if self.text[self.pos] != "{":
                self.skip()
                return
            self.pos += 1

            def member(key: str) -> None:
                if key == "source":
                    found[index] = self.source_value(self.key_start)
                else:
                    self.skip()

            self.members(member)

        self.members(top)
        return found

    def source_value(self, key_start: int) -> SourceValue:
        line_start = self.text.rfind("\n", 0, key_start) + 1
        prefix = self.text[line_start:key_start]
        key_indent = prefix if not prefix.strip() else ""
        start = self.pos
        if self.text[start] == '"':
            self.string()
            return SourceValue(start, self.pos, False, ((start, self.pos),), key_indent)
        if self.text[start] != "[":
            self.skip()
            return SourceValue(start, self.pos, False, (), key_indent)
        self.pos += 1
        literals: list[tuple[int, int]] = []

        def item(index: int) -> None:
            begin = self.pos
            self.skip()
            literals.append((begin, self.pos))

        self.items(item)
        return SourceValue(start, self.pos, True, tuple(literals), key_indent)


# -- IPython syntax --------------------------------------------------------------------------

_CELL_MAGIC = re.compile(r"%%([A-Za-z_][\w.-]*)")
_LINE_MAGIC = re.compile(
    r"""(?:
        [%!]                                                    # %magic, !shell, !!shell
      | [A-Za-z_][\w.]*(?:\[[^\]]*\])*(?:\s*,\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])*)*\s*=\s*[%!]  # x = %magic, a[0], b = !shell
      | \?{1,2}\s*[A-Za-z_*]                                    # ?name, ??name
      | [A-Za-z_*][\w.*]*(?:\[[^\]]*\]|\([^)]*\))*\s*\?{1,2}\s*$  # name?, obj.attr??, torch.*Tensor? (wildcards)
      | (?:pip|conda|mamba)\s+(?:install|uninstall|download)\b  # automagic installs
    )""",
    re.X,
)
_GET_IPYTHON = re.compile(r"(?:[A-Za-z_]\w*\s*=\s*)?get_ipython\(\)")


def cell_magic(text: str) -> str | None:
    """The name of the cell magic on the cell's first non-blank line, if any."""
    for line in text.split("\n"):
        if line.strip():
            match = _CELL_MAGIC.match(line.lstrip())
            return match.group(1) if match else None
    return None


def is_python_cell(cell: Cell, notebook_is_python: bool = True) -> bool:
    if cell.cell_type != "code" or not notebook_is_python:
        return False
    if cell.language is not None and cell.language not in PYTHON_LANGUAGES:
        return False
    magic = cell_magic(cell.text)
    return magic is None or magic in PYTHON_CELL_MAGICS


class _LineState:
    """Just enough of Python's lexer to know whether a line starts a new logical line."""

    def __init__(self) -> None:
        self.quote: str | None = None  # the open triple quote, if any
        self.depth = 0
        self.continued = False

    @property
    def at_statement_start(self) -> bool:
        return self.quote is None and self.depth == 0 and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        self.continued = False
        while i < n:
            if self.quote is not None:
                end = line.find(self.quote, i)
                while end != -1 and _escaped(line, end):
                    end = line.find(self.quote, end + 1)
                if end == -1:
                    return
                i = end + 3
                self.quote = None
                continue
            ch = line[i]
            if ch == "#":
                return
            if ch in "\"'":
                if line.startswith(ch * 3, i):
                    self.quote = ch * 3
                    i += 3
                    continue
                j = i + 1
                while j < n and line[j] != ch:
                    j += 2 if line[j] == "\\" else 1
                i = j + 1
                continue
            if ch in "([{":
                self.depth += 1
            elif ch in ")]}":
                self.depth = max(0, self.depth - 1)
            elif ch == "\\" and i == n - 1:
                self.continued = True
            i += 1


def _escaped(line: str, index: int) -> bool:
    count = 0
    while index > 0 and line[index - 1] == "\\":
        count += 1
        index -= 1
    return count % 2 == 1


def ipython_lines(text: str) -> tuple[list[str], set[int], dict[int, int]]:
    """One code cell as IPython runs it, line for line: dedented (`dedent_cell`), then its
    IPython syntax neutralised; returns (lines, neutral line numbers, {line: columns removed})."""
    lines = text.split("\n")
    shifts = dedent_cell(lines)
    out, neutral = neutralize("\n".join(lines))
    return out, neutral, shifts


def neutralize(text: str) -> tuple[list[str], set[int]]:
    """The lines of one code cell with IPython syntax replaced; returns (lines, neutral line numbers)."""
    lines = text.split("\n")
    out: list[str] = []
    neutral: set[int] = set()
    state = _LineState()
    magic_state = _LineState()
    python_magic = False
    seen_code = False
    magic_continues = False
    for number, line in enumerate(lines):
        stripped = line.lstrip(" \t")
        indent = line[: len(line) - len(stripped)]
        body = stripped.rstrip("\r")
        is_magic = magic_continues
        if not is_magic and state.at_statement_start and body and not body.startswith("#"):
            if not seen_code and body.startswith("%%"):
                is_magic = True
            elif _LINE_MAGIC.match(body):
                is_magic = True
            elif _GET_IPYTHON.match(body):
                probe = _LineState()
                probe.feed(body)
                is_magic = probe.at_statement_start
        if body and not body.startswith("#"):
            seen_code = True
        if is_magic:
            neutral.add(number)
            # a continuation line of a shell command is blank: `pass` at its indentation could be an indent error
            out.append("" if magic_continues else f"{indent}pass" + ("\r" if line.endswith("\r") else ""))
            if not magic_continues:
                # a line magic's Python (`%time x = f(`) goes on to the line that closes its bracket
                magic_state = _LineState()
                escape = re.search(r"[%!]", body)
                python_magic = escape is not None and escape.group() == "%" and not body.startswith("%%")
            if python_magic:
                magic_state.feed(body[escape.end():].lstrip("%") if not magic_continues and escape else body)
            magic_continues = body.endswith("\\") or (python_magic and not magic_state.at_statement_start)
            continue
        magic_continues = False
        out.append(line)
        state.feed(line.rstrip("\r"))
    return out, neutral


def dedent_cell(lines: list[str]) -> dict[int, int]:
    """IPython runs a cell indented as a whole (its first non-blank line indented) as if it were
    not: it removes that line's indentation from every line that starts with it. Done in place;
    returns {line number: columns removed}, so positions map back by adding the shift."""
    first = next((n for n, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return {}
    line = lines[first]
    space = line[: len(line) - len(line.lstrip(" \t"))]
    if not space:
        return {}
    shifts: dict[int, int] = {}
    for n in range(first, len(lines)):
        if lines[n].startswith(space):
            lines[n] = lines[n][len(space) :]
            shifts[n] = len(space)
    return shifts


# -- the joined module -----------------------------------------------------------------------


@dataclass(frozen=True)
class CellPosition:
    cell: int  # 1-based index among all cells
    line: int  # 0-based line inside the cell
    col: int


@dataclass(frozen=True)
class CellRange:
    first_line: int  # the cell's first line in the module
    line_count: int


@dataclass
class Joined:
    """The Python cells of a notebook as one module, with the map back to the cells."""

    notebook: Notebook
    text: str
    lines: list[tuple[int, int]]  # module line -> (cell index, line in cell)
    neutral: frozenset[int]  # module lines that held IPython syntax
    ranges: dict[int, CellRange] = field(default_factory=dict)  # cell index -> where it sits
    shifts: dict[int, int] = field(default_factory=dict)  # module line -> columns IPython's dedent removed

    def col_in_cell(self, line: int, col: int) -> int:
        """The column in the cell of a module column (a dedented cell's lines start further right)."""
        return col + self.shifts.get(line, 0)

    def col_in_module(self, line: int, col: int) -> int:
        return max(col - self.shifts.get(line, 0), 0)

    @cached_property
    def source(self) -> SourceText:
        return SourceText(self.text)

    @property
    def code_cells(self) -> list[int]:
        """Indexes (0-based, among all cells) of the cells in the module, in order."""
        return list(self.ranges)

    def cell_of_line(self, line: int) -> tuple[int, int]:
        """(cell index, line in cell) of a module line; past the end: the last line of the last cell."""
        if not self.lines:
            return (0, 0)
        if line < 0:
            return self.lines[0]
        if line >= len(self.lines):
            return self.lines[-1]
        return self.lines[line]

    def to_cell(self, pos: Position) -> CellPosition:
        if pos.line >= len(self.lines) and self.lines:
            index, line = self.lines[-1]
            return CellPosition(index + 1, line, len(self.notebook.cells[index].text.split("\n")[line]))
        index, line = self.cell_of_line(pos.line)
        return CellPosition(index + 1, line, self.col_in_cell(pos.line, pos.col))

    def to_module(self, cell_index: int, pos: Position) -> Position | None:
        """A position inside cell `cell_index` (0-based) as a module position (None: not a code cell)."""
        rng = self.ranges.get(cell_index)
        if rng is None:
            return None
        line = rng.first_line + min(max(pos.line, 0), rng.line_count - 1)
        return Position(line, self.col_in_module(line, pos.col))

    def cell_span(self, span: Span) -> tuple[int, Span]:
        """The cell of the span's start (0-based) and the span inside it, its end clamped to that cell."""
        index, line = self.cell_of_line(span.start.line)
        start = Position(line, self.col_in_cell(span.start.line, span.start.col))
        rng = self.ranges.get(index)
        if rng is not None and span.end.line < rng.first_line + rng.line_count:
            end = Position(span.end.line - rng.first_line, self.col_in_cell(span.end.line, span.end.col))
        else:
            last = self.notebook.cells[index].text.split("\n")
            end = Position(len(last) - 1, len(last[-1]))
        return index, Span(start, max(start, end))

    def cell_text(self, index: int) -> str:
        return self.notebook.cells[index].text

    @property
    def segments(self) -> list[tuple[int, int]]:
        """(first module line, line count) of each cell, in order: the parts that compile alone."""
        return [(rng.first_line, rng.line_count) for rng in self.ranges.values()]

    def cite(self, line: int) -> str:
        """A module line as a message names it in a notebook: `cell 5, line 3` (1-based)."""
        index, inside = self.cell_of_line(line)
        return f"cell {index + 1}, line {inside + 1}"


def join(notebook: Notebook) -> Joined:
    """Join the Python code cells of `notebook` into one module."""
    parts: list[str] = []
    line_map: list[tuple[int, int]] = []
    neutral: set[int] = set()
    ranges: dict[int, CellRange] = {}
    shifts: dict[int, int] = {}
    if notebook.is_python:
        for cell in notebook.cells:
            if not is_python_cell(cell):
                continue
            cell_lines, magic, shifted = ipython_lines(cell.text)
            first = len(line_map)
            ranges[cell.index] = CellRange(first, len(cell_lines))
            neutral.update(first + n for n in magic)
            shifts.update((first + n, cols) for n, cols in shifted.items())
            line_map.extend((cell.index, n) for n in range(len(cell_lines)))
            parts.extend(cell_lines)
    text = "\n".join(parts) + "\n" if parts else ""
    return Joined(notebook, text, line_map, frozenset(neutral), ranges, shifts)


# -- fixes -----------------------------------------------------------------------------------


def touches_neutral(neutral: frozenset[int] | set[int], span: Span) -> bool:
    """Whether an edit over `span` would rewrite (part of) a neutralised line."""
    for line in neutral:
        if line < span.start.line or line > span.end.line:
            continue
        if span.start.line < line < span.end.line:
            return True
        if line == span.start.line and (span.start.col > 0 or (span.end > span.start and span.end.line > line)):
            return True
        if line == span.end.line and span.end.col > 0:
            return True
    return False


def cell_edit(joined: Joined, edit: Edit) -> tuple[int, Edit] | None:
    """One module edit as (cell index, edit inside that cell), or None when it cannot be
    expressed inside one cell (it spans cells, rewrites a neutralised magic line, or falls in a
    cell IPython dedents)."""
    if not joined.lines or touches_neutral(joined.neutral, edit.span):
        return None
    start_cell, start_line = joined.cell_of_line(edit.span.start.line)
    if edit.span.start.line >= len(joined.lines):
        return None
    rng = joined.ranges[start_cell]
    if any(line in joined.shifts for line in range(rng.first_line, rng.first_line + rng.line_count)):
        return None  # a cell IPython dedents: the fix's indentation is the module's, not the cell's
    cell_lines = joined.cell_text(start_cell).split("\n")
    start = Position(start_line, edit.span.start.col)
    end_line = edit.span.end.line - rng.first_line
    content = edit.content
    if end_line < rng.line_count:
        end = Position(end_line, edit.span.end.col)
    elif end_line == rng.line_count and edit.span.end.col == 0:
        # the edit ends at the start of the next cell: the cell's last line break is the separator
        end = Position(rng.line_count - 1, len(cell_lines[-1]))
        if content.endswith("\n"):
            content = content[:-1]
            if content.endswith("\r"):
                content = content[:-1]
        elif start.col == 0 and start.line > 0 and not content:
            start = Position(start.line - 1, len(cell_lines[start.line - 1]))
    else:
        return None
    if start.line >= len(cell_lines) or end < start:
        return None
    return start_cell, Edit(Span(start, end), content)


@dataclass
class FixOutcome:
    raw: str  # the new notebook text (the old one when nothing applied)
    applied: int
    cells: dict[int, str]  # cell index -> new text, for the cells that changed


def apply_fixes(joined: Joined, fixes: Sequence[Fix]) -> FixOutcome:
    """Apply whole fixes whose edits fit inside single cells and do not overlap; write the notebook."""
    texts, applied = fixed_cells(joined, fixes, stored_only=True)
    if not texts:
        return FixOutcome(joined.notebook.raw, 0, {})
    return FixOutcome(replace_sources(joined.notebook, texts), applied, texts)


def fixed_cells(joined: Joined, fixes: Sequence[Fix], *, stored_only: bool = False) -> tuple[dict[int, str], int]:
    """The new text of each cell that the fixes change (cell index -> text), and how many fixes
    apply: whole fixes whose edits fit inside single cells and do not overlap earlier ones.
    `stored_only`: skip cells without a stored `source` (nothing to write them into)."""
    source = joined.source
    taken: list[tuple[int, int]] = []
    per_cell: dict[int, list[Edit]] = {}
    applied = 0
    for fix in fixes:
        mapped = [cell_edit(joined, e) for e in fix.edits]
        if not mapped or any(m is None for m in mapped):
            continue
        if stored_only and any(joined.notebook.cells[m[0]].value is None for m in mapped if m is not None):
            continue
        ranges = [(source.offset(e.span.start), source.offset(e.span.end)) for e in fix.edits]
        if any(_overlaps(r, t) for r in ranges for t in taken):
            continue
        taken.extend(ranges)
        for m in mapped:
            assert m is not None
            per_cell.setdefault(m[0], []).append(m[1])
        applied += 1
    texts: dict[int, str] = {}
    for index, edits in per_cell.items():
        old = joined.cell_text(index)
        new = apply_edits(SourceText(old), edits)
        if new != old:
            texts[index] = new
    return texts, applied if texts else 0


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] == b[0] == b[1]:
        return True
    return a[0] < b[1] and b[0] < a[1]


# -- writing ---------------------------------------------------------------------------------


def split_source(text: str) -> list[str]:
    """A cell text as nbformat stores it: lines that keep their `\\n`, no empty last item."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def render_source(notebook: Notebook, value: SourceValue, text: str) -> str:
    """The JSON for a cell's new `source`, in the style of the value it replaces."""
    style = notebook.style
    raw = notebook.raw

    def dump(s: str) -> str:
        return json.dumps(s, ensure_ascii=style.ensure_ascii)

    if not value.is_list:
        return dump(text)
    items = [dump(s) for s in split_source(text)]
    inside = raw[value.start + 1 : value.end - 1]
    multiline = "\n" in inside or not value.literals
    if not items:
        return "[]"
    if not multiline:
        first_sep = re.search(r",(\s*)", raw[value.literals[0][1] : value.literals[1][0]]) if len(value.literals) > 1 else None
        sep = "," + (first_sep.group(1) if first_sep else " ")
        return "[" + sep.join(items) + "]"
    nl = style.newline
    closing = value.key_indent
    tail = raw[: value.end - 1]
    last_break = tail.rfind("\n")
    if last_break != -1 and not tail[last_break + 1 :].strip():
        closing = tail[last_break + 1 :]
    if value.literals:
        head = raw[: value.literals[0][0]]
        item_indent = head[head.rfind("\n") + 1 :]
        if item_indent.strip():
            item_indent = closing + (style.indent or " ")
    else:
        item_indent = closing + (style.indent or " ")
    return "[" + nl + ("," + nl).join(item_indent + item for item in items) + nl + closing + "]"


def replace_sources(notebook: Notebook, texts: dict[int, str]) -> str:
    """The notebook text with the `source` of the given cells (index -> new text) replaced."""
    raw = notebook.raw
    pieces: list[str] = []
    cursor = 0
    changed = [(value, index) for index in texts if (value := notebook.cells[index].value) is not None]
    for value, index in sorted(changed, key=lambda item: item[0].start):
        if texts[index] == notebook.cells[index].text:
            continue
        pieces.append(raw[cursor : value.start])
        pieces.append(render_source(notebook, value, texts[index]))
        cursor = value.end
    pieces.append(raw[cursor:])
    return "".join(pieces)


# -- positions in the stored file ------------------------------------------------------------


def _decode_offsets(raw: str, start: int, end: int) -> list[int]:
    """For one JSON string literal raw[start:end] (quotes included): the raw offset of each
    decoded character, plus the offset of the closing quote."""
    out: list[int] = []
    i = start + 1
    stop = end - 1
    while i < stop:
        out.append(i)
        if raw[i] != "\\":
            i += 1
            continue
        if raw[i + 1] == "u":
            code = int(raw[i + 2 : i + 6], 16)
            if 0xD800 <= code < 0xDC00 and raw.startswith("\\u", i + 6):
                i += 12
            else:
                i += 6
        else:
            i += 2
    out.append(stop)
    return out


def raw_position(notebook: Notebook, cell_index: int, pos: Position) -> Position | None:
    """Where a position inside a cell's text is in the stored .ipynb text (0-based line and
    code-point column of the JSON file), or None when the cell has no stored source."""
    cell = notebook.cells[cell_index]
    value = cell.value
    if value is None or not value.literals:
        return None
    offsets: list[int] = []
    for n, (start, end) in enumerate(value.literals):
        decoded = _decode_offsets(notebook.raw, start, end)
        offsets.extend(decoded if n == len(value.literals) - 1 else decoded[:-1])
    text_offset = SourceText(cell.text).offset(pos)
    raw_offset = offsets[min(text_offset, len(offsets) - 1)]
    return _raw_source(notebook).position(raw_offset)


_RAW_SOURCES: dict[int, SourceText] = {}


def _raw_source(notebook: Notebook) -> SourceText:
    key = id(notebook.raw)
    cached = _RAW_SOURCES.get(key)
    if cached is None or cached.text is not notebook.raw:
        if len(_RAW_SOURCES) > 16:
            _RAW_SOURCES.clear()
        cached = _RAW_SOURCES[key] = SourceText(notebook.raw)
    return cached


def from_cells(cells: Sequence[tuple[str, str, str | None]], language: str | None = None) -> Notebook:
    """A notebook known only by its cells, (kind, text, language) each, as an editor sends them.
    It has no stored JSON: positions map, fixes map, nothing is written."""
    parsed = tuple(Cell(i, kind, text, None, lang.lower() if lang else None) for i, (kind, text, lang) in enumerate(cells))
    return Notebook("", parsed, 5, language.lower() if language else None, JsonStyle(" ", False, "\n"))


def cell_texts(notebook: Notebook) -> list[str]:
    return [cell.text for cell in notebook.cells]


def changed_cells(before: Notebook, after: Notebook) -> Iterable[tuple[int, str, str]]:
    """(cell index, old text, new text) for the cells whose text differs (same cell count)."""
    for old, new in zip(before.cells, after.cells, strict=False):
        if old.text != new.text:
            yield old.index, old.text, new.text
