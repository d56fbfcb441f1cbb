"""A content-hash cache of per-file results, so unchanged files are not analysed again.

One JSON file per (package version, effective configuration), under
`<project root>/.torch-preflight-cache/<version>/<fingerprint>.json`, or under the user
cache folder (`$XDG_CACHE_HOME/torch-preflight`, `~/.cache/torch-preflight`) when there is
no project root; `TORCH_PREFLIGHT_CACHE_DIR` or `--cache-dir` choose another folder.

An entry maps a file's absolute path to the hash of its bytes, its serialised
diagnostics and syntax errors, and the other project files its analysis read (path,
mtime, size): the entry is stale when any of them changed. The fingerprint covers the version, the configuration
(rule selection, per-file ignores, preview, estimator settings) and a stamp of the
analysis code itself (sizes and mtimes of the core/rules/estimator modules), so a
development checkout never serves results of older rules. A corrupt or unreadable cache
is ignored and rewritten; saving is atomic (write, then rename) and best effort, and
drops the cache files of other configurations unused for 30 days.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from torch_preflight import __version__
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Related, Severity
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.project import Dependency
from torch_preflight.core.source import Position, Span

CACHE_DIR_NAME = ".torch-preflight-cache"
FORMAT = 2
STALE_AFTER = 30 * 24 * 3600  # seconds


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """Sizes and mtimes of the modules that produce diagnostics."""
    import torch_preflight.core
    import torch_preflight.estimator
    import torch_preflight.rules

    digest = hashlib.blake2b(digest_size=16)
    roots = [Path(m.__file__).parent for m in (torch_preflight.core, torch_preflight.rules, torch_preflight.estimator) if m.__file__]
    files = [Path(__file__).with_name("analyze.py")]
    for root in roots:
        for folder, _dirs, names in os.walk(root):
            files.extend(Path(folder, n) for n in names if n.endswith(".py"))
    for file in sorted(files):
        with contextlib.suppress(OSError):
            st = file.stat()
            digest.update(f"{file}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def fingerprint(config: Config) -> str:
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k != "source"}
    payload = json.dumps([FORMAT, __version__, code_stamp(), fields], sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=16).hexdigest()


def default_dir(config: Config) -> Path:
    env = os.environ.get("TORCH_PREFLIGHT_CACHE_DIR")
    if env:
        return Path(env)
    if config.root is not None:
        return config.root / CACHE_DIR_NAME
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch-preflight"


# -- serialisation -------------------------------------------------------------------------


def _span(span: Span) -> list[int]:
    return [span.start.line, span.start.col, span.end.line, span.end.col]


def _unspan(data: list[int]) -> Span:
    a, b, c, d = (int(x) for x in data)
    return Span(Position(a, b), Position(c, d))


def dump_diagnostic(d: Diagnostic) -> dict[str, Any]:
    out: dict[str, Any] = {"c": d.code, "n": d.name, "m": d.message, "s": _span(d.span), "v": d.severity.value}
    if d.fix is not None:
        out["f"] = [d.fix.title, d.fix.applicability.value, [[*_span(e.span), e.content] for e in d.fix.edits]]
    if d.related:
        out["r"] = [[*_span(r.span), r.message] for r in d.related]
    if d.data:
        out["d"] = [list(kv) for kv in d.data]
    return out


def load_diagnostic(data: dict[str, Any]) -> Diagnostic:
    fix = None
    if "f" in data:
        title, applicability, edits = data["f"]
        fix = Fix(str(title), tuple(Edit(_unspan(e[:4]), str(e[4])) for e in edits), Applicability(applicability))
    return Diagnostic(
        code=str(data["c"]),
        name=str(data["n"]),
        message=str(data["m"]),
        span=_unspan(data["s"]),
        severity=Severity(data["v"]),
        fix=fix,
        related=tuple(Related(_unspan(r[:4]), str(r[4])) for r in data.get("r", ())),
        data=tuple((str(k), str(v)) for k, v in data.get("d", ())),
    )


@dataclasses.dataclass
class Entry:
    diagnostics: list[Diagnostic]
    syntax_errors: list[SyntaxProblem]


class Cache:
    def __init__(self, file: Path | None, fingerprint: str) -> None:
        self.file = file
        self.fingerprint = fingerprint
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        self.hits = 0
        if file is not None:
            self._load()

    @classmethod
    def open(cls, config: Config, directory: Path | None = None) -> Cache:
        fp = fingerprint(config)
        folder = (directory or default_dir(config)) / __version__
        return cls(folder / f"{fp}.json", fp)

    @classmethod
    def disabled(cls) -> Cache:
        return cls(None, "")

    def _load(self) -> None:
        assert self.file is not None
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if (
            isinstance(data, dict)
            and data.get("format") == FORMAT
            and data.get("version") == __version__
            and data.get("fingerprint") == self.fingerprint
            and isinstance(data.get("files"), dict)
        ):
            self.entries = data["files"]

    def get(self, path: str, digest: str) -> Entry | None:
        raw = self.entries.get(path)
        if not isinstance(raw, list) or len(raw) != 4 or raw[0] != digest:
            return None
        try:
            if not all(Dependency(str(p), int(m), int(n)).unchanged() for p, m, n in raw[3]):
                return None  # a module it imports from has changed
            entry = Entry(
                [load_diagnostic(d) for d in raw[1]],
                [SyntaxProblem(str(m), Position(int(line), int(col))) for m, line, col in raw[2]],
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            self.entries.pop(path, None)
            self.dirty = True
            return None
        self.hits += 1
        return entry

    def put(
        self,
        path: str,
        digest: str,
        diagnostics: list[Diagnostic],
        syntax_errors: list[SyntaxProblem],
        dependencies: tuple[Dependency, ...] = (),
    ) -> None:
        if self.file is None:
            return
        self.entries[path] = [
            digest,
            [dump_diagnostic(d) for d in diagnostics],
            [[p.message, p.position.line, p.position.col] for p in syntax_errors],
            [[d.path, d.mtime_ns, d.size] for d in dependencies],
        ]
        self.dirty = True

    def save(self) -> None:
        """Write atomically; never fails the run (a read-only tree just has no cache)."""
        if self.file is None or not self.dirty:
            return
        payload = {"format": FORMAT, "version": __version__, "fingerprint": self.fingerprint, "files": self.entries}
        try:
            folder = self.file.parent
            folder.mkdir(parents=True, exist_ok=True)
            top = folder.parent
            ignore = top / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# Automatically created by torch-preflight.\n*\n", encoding="utf-8")
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle, separators=(",", ":"))
                os.replace(tmp, self.file)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
        self.dirty = False
        self._prune()

    def _prune(self) -> None:
        """Drop caches of other configurations that no run has written for `STALE_AFTER` seconds."""
        assert self.file is not None
        cutoff = time.time() - STALE_AFTER
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.file.parent):
                if entry.name.endswith(".json") and entry.path != str(self.file) and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
