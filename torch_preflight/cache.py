"""A content-hash cache of per-file results, so unchanged files are not analysed again.

One JSON file per (package version, effective configuration), under
`<project root>/.torch-preflight-cache/<version>/<fingerprint>.json`, or under the user
cache folder (`$XDG_CACHE_HOME/torch-preflight`, `~/.cache/torch-preflight`) when there is
no project root; `TORCH_PREFLIGHT_CACHE_DIR` or `--cache-dir` choose another folder.

An entry maps a file's absolute path to the hash of its bytes, its serialised
diagnostics and syntax errors, the other project files its analysis read (path,
mtime, size): the entry is stale when any of them changed, and the file's own stat
(size, mtime_ns, ctime_ns) when it was read. A later run whose stat of the file is the
same trusts the entry without reading or hashing the file (as git's index and ruff's
cache do); when the stat differs, the hash decides, and a matching hash only refreshes
the stored stat (a `touch` costs one hash, once). Any write changes ctime, even one that
keeps the size and restores the mtime with `os.utime`, so such an edit is re-analysed
too. A stat is recorded only when the file's mtime and ctime are older than
`SETTLE_NS` at the time it was read ("racily clean" files, modified within the
timestamp granularity of the read, are always hashed). The fingerprint covers the version, the configuration
(rule selection, per-file ignores, preview, estimator settings) and a stamp of the
analysis code itself (sizes and mtimes of the core/rules/estimator modules), so a
development checkout never serves results of older rules. A corrupt or unreadable cache
is ignored and rewritten; saving is atomic (write, then rename) and best effort, and
drops the cache files of other configurations unused for 30 days.

Beside it, `<fingerprint>.summaries.json` keeps the whole-program model's answers (function
summaries, the events a call into another module contributes: `core.program.SummaryStore`) under
content keys, each with the files it rests on; it is read only when some file must be analysed,
and saved with the entries whose files are still unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import stat
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch_preflight import __version__
from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Related, Severity
from torch_preflight.core.parse import SyntaxProblem
from torch_preflight.core.source import Position, Span

if TYPE_CHECKING:
    from torch_preflight.core.project import Dependency

CACHE_DIR_NAME = ".torch-preflight-cache"
FORMAT = 4
SUMMARIES_SUFFIX = ".summaries.json"
STALE_AFTER = 30 * 24 * 3600  # seconds
SETTLE_NS = 2_000_000_000  # a file modified less than this before it was read is never trusted by its stat

StatKey = tuple[int, int, int]  # (size, mtime_ns, ctime_ns)


def stat_key(st: os.stat_result, now_ns: int) -> StatKey | None:
    """The stat to store for a regular file read at (or after) `now_ns`, or None when it is too
    recent to be trusted: an edit within the same timestamp tick would leave the stat unchanged."""
    if not stat.S_ISREG(st.st_mode) or max(st.st_mtime_ns, st.st_ctime_ns) >= now_ns - SETTLE_NS:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _unchanged(path: str, mtime_ns: int, size: int) -> bool:
    """`core.project.Dependency.unchanged`, without importing the analysis modules."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_mtime_ns == mtime_ns and st.st_size == size


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@lru_cache(maxsize=1)
def code_stamp() -> str:
    """Sizes and mtimes of the modules that produce diagnostics (found without importing them)."""
    digest = hashlib.blake2b(digest_size=16)
    roots: list[Path] = []
    for name in ("torch_preflight.core", "torch_preflight.rules", "torch_preflight.estimator"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            roots.append(Path(spec.origin).parent)
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

    def _entry(self, path: str, raw: Any) -> Entry | None:
        try:
            if not all(_unchanged(str(p), int(m), int(n)) for p, m, n in raw[3]):
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

    def get_clean_by_stat(self, path: str, key: StatKey | None) -> Entry | None:
        """The entry of a file whose stat is the one stored with it, when it holds no findings and no
        syntax errors (so that nothing needs the file's text): a hit without reading the file."""
        if key is None:
            return None
        raw = self.entries.get(path)
        if not isinstance(raw, list) or len(raw) != 5 or raw[1] or raw[2] or not isinstance(raw[4], list):
            return None
        if tuple(raw[4]) != key:
            return None
        return self._entry(path, raw)

    def get(self, path: str, digest: str, key: StatKey | None = None) -> Entry | None:
        raw = self.entries.get(path)
        if not isinstance(raw, list) or len(raw) != 5 or raw[0] != digest:
            return None
        entry = self._entry(path, raw)
        if entry is not None and key is not None and raw[4] != list(key):
            raw[4] = list(key)  # same bytes, new stat (touched, copied): trust the new stat from now on
            self.dirty = True
        return entry

    def put(
        self,
        path: str,
        digest: str,
        diagnostics: list[Diagnostic],
        syntax_errors: list[SyntaxProblem],
        dependencies: tuple[Dependency, ...] = (),
        key: StatKey | None = None,
    ) -> None:
        if self.file is None:
            return
        self.entries[path] = [
            digest,
            [dump_diagnostic(d) for d in diagnostics],
            [[p.message, p.position.line, p.position.col] for p in syntax_errors],
            [[d.path, d.mtime_ns, d.size] for d in dependencies],
            list(key) if key is not None else None,
        ]
        self.dirty = True

    # -- the whole-program summaries (core/program.py SummaryStore), in a file of their own, read only
    # -- when some file must be analysed (a fully warm run never needs them)

    @property
    def summaries_file(self) -> Path | None:
        return self.file.with_name(self.file.stem + SUMMARIES_SUFFIX) if self.file is not None else None

    def load_summaries(self) -> dict[str, Any]:
        """The stored summaries (JSON data keyed by content, see SummaryStore), {} when none or unreadable."""
        if self.summaries_file is None:
            return {}
        try:
            data = json.loads(self.summaries_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        ok = isinstance(data, dict) and data.get("format") == FORMAT and data.get("fingerprint") == self.fingerprint
        entries = data.get("entries") if ok else None
        return entries if isinstance(entries, dict) else {}

    def save_summaries(self, entries: dict[str, Any], added: dict[str, Any]) -> None:
        """Write `entries` updated with `added`, keeping only those whose files are unchanged (best effort)."""
        if self.summaries_file is None or not added:
            return
        merged = {**entries, **added}
        seen: dict[tuple[str, int, int], bool] = {}

        def fresh(value: Any) -> bool:
            try:
                return all(seen.setdefault((str(p), int(m), int(n)), _unchanged(str(p), int(m), int(n))) for p, m, n in value["d"])
            except (TypeError, KeyError, ValueError):
                return False

        kept = {k: v for k, v in merged.items() if fresh(v)}
        self._write(self.summaries_file, {"format": FORMAT, "fingerprint": self.fingerprint, "entries": kept})

    def save(self) -> None:
        """Write atomically; never fails the run (a read-only tree just has no cache)."""
        if self.file is None or not self.dirty:
            return
        payload = {"format": FORMAT, "version": __version__, "fingerprint": self.fingerprint, "files": self.entries}
        if not self._write(self.file, payload):
            return
        self.dirty = False
        self._prune()

    def _write(self, file: Path, payload: dict[str, Any]) -> bool:
        try:
            folder = file.parent
            folder.mkdir(parents=True, exist_ok=True)
            top = folder.parent
            ignore = top / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# Automatically created by torch-preflight.\n*\n", encoding="utf-8")
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(payload, handle, separators=(",", ":"))
                os.replace(tmp, file)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return False
        return True

    def _prune(self) -> None:
        """Drop caches of other configurations that no run has written for `STALE_AFTER` seconds."""
        assert self.file is not None
        cutoff = time.time() - STALE_AFTER
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.file.parent):
                mine = entry.path in (str(self.file), str(self.summaries_file))
                if entry.name.endswith(".json") and not mine and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
