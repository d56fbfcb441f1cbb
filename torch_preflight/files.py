"""Finding the files to check, and reading them safely.

Discovery walks each folder with `os.scandir`, pruning excluded folders before descending
(hidden folders, `.venv`, `build`, ... and the config's `exclude`/`extend-exclude`), so a
big tree costs only the folders that are checked. Files named on the command line are
always checked. Reading never raises: a file that cannot be read or decoded comes back as
a `ReadError` with the reason.
"""

from __future__ import annotations

import codecs
import fnmatch
import io
import os
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torch_preflight.core.config import DEFAULT_EXCLUDE, Config

MAX_FILE_SIZE = 10 * 1024 * 1024  # bytes; larger files are skipped with a note
PY_SUFFIXES = (".py", ".ipynb")  # .ipynb: Jupyter notebooks, their Python cells joined


@dataclass(frozen=True)
class Loaded:
    text: str
    data: bytes  # the raw bytes (hashed for the cache)
    encoding: str  # to write fixes back the way the file was
    bom: bool = False


@dataclass(frozen=True)
class ReadError:
    reason: str
    skipped: bool = False  # True: deliberately skipped (too large), a note rather than an error


class Excluder:
    """Exclusion patterns compiled once: a pattern without '/' matches a file or folder name,
    one with '/' matches the path relative to the config root (or the walked folder)."""

    def __init__(self, config: Config, base: Path) -> None:
        patterns = (*(config.exclude or DEFAULT_EXCLUDE), *config.extend_exclude)
        names = [p for p in patterns if "/" not in p.strip("/")]
        paths = [p.strip("/") for p in patterns if "/" in p.strip("/")]
        self.base = (config.root or base).resolve()
        self._name = re.compile("|".join(fnmatch.translate(p.strip("/")) for p in names)) if names else None
        self._path = re.compile("|".join(fnmatch.translate(p) for p in paths)) if paths else None

    def excluded(self, path: Path, name: str) -> bool:
        if self._name is not None and self._name.match(name):
            return True
        if self._path is not None:
            try:
                rel = path.relative_to(self.base).as_posix()
            except ValueError:
                return False
            return bool(self._path.match(rel))
        return False


def walk(folder: Path, excluder: Excluder) -> Iterator[Path]:
    """Python files and notebooks below `folder`, without descending into hidden or excluded folders."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        entries.sort(key=lambda e: e.name, reverse=True)
        for entry in entries:
            name = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            path = Path(entry.path)
            if is_dir:
                if name.startswith(".") or excluder.excluded(path, name):
                    continue
                stack.append(path)
            elif name.endswith(PY_SUFFIXES) and not name.startswith(".") and not excluder.excluded(path, name):
                yield path


def read_bytes(data: bytes) -> Loaded | ReadError:
    """Decode Python source bytes: a PEP 263 coding cookie or UTF-8 (with or without BOM)."""
    if b"\x00" in data[:8192]:
        return ReadError("binary file (contains NUL bytes)")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # undecodable first lines, or an unknown or conflicting coding cookie
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            return ReadError(f"not valid UTF-8: byte 0x{data[bad.start]:02x} at offset {bad.start}")
        return ReadError(f"cannot decode: {exc.msg}")
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8) :] if bom else data
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        return ReadError(f"not valid {exc.encoding.upper()}: byte 0x{exc.object[exc.start]:02x} at offset {exc.start}")
    except LookupError:
        return ReadError(f"unknown encoding {encoding!r}")
    return Loaded(text, data, encoding, bom)


def read_source(path: Path, max_size: int | None = None) -> Loaded | ReadError:
    max_size = MAX_FILE_SIZE if max_size is None else max_size
    try:
        size = path.stat().st_size
        if size > max_size:
            return ReadError(f"skipped: {size / 1e6:.1f} MB is over the {max_size / 1e6:.0f} MB limit", skipped=True)
        data = path.read_bytes()
    except IsADirectoryError:
        return ReadError("is a directory")
    except FileNotFoundError:
        return ReadError("no such file or directory")
    except PermissionError:
        return ReadError("permission denied")
    except OSError as exc:
        return ReadError(exc.strerror or str(exc))
    return read_bytes(data)


def encode(loaded: Loaded, text: str) -> bytes:
    """Text back to bytes the way the file was stored."""
    data = text.encode(loaded.encoding)
    return codecs.BOM_UTF8 + data if loaded.bom else data


def display_path(path: Path, cwd: Path) -> str:
    """Relative to the working directory when below it, else absolute."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)
