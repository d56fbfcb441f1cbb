"""Real files for the language-server benchmark (issue 19): materialise them, pick the edits.

`python bench/lsp/realfiles.py` fetches every file of bench/lsp/real_files.json into
bench/out/lsp/files/ (ignored, never committed): a `pypi` entry with `pip download --no-deps`
(the wheel's member is extracted), a `git` entry from a local bare mirror when one is found
(`BENCH_MIRRORS`, default `/work/.mirror/{owner}+{name}/repo`) or else a clone of the GitHub
repository, always at the pinned commit. Files already there are kept.

`files()` lists what the real-files mode measures: those files and, when the corpus of
`make bench-real` is present (bench/out/corpus), every corpus file over 300 lines.

Edits (each is a pair of keystrokes, typed then deleted, so the file returns to its text):
- valid: a `1` typed before an integer literal's first digit (`10` -> `110`; `0` -> `10`), which
  keeps the file valid;
- broken: `(` typed at the end of a code line, which leaves an unclosed bracket.
"""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
import tempfile
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "out"
FILES = OUT / "lsp" / "files"
CORPUS = OUT / "corpus"
MANIFEST = HERE / "real_files.json"
MIRRORS = os.environ.get("BENCH_MIRRORS", "/work/.mirror/{owner}+{name}/repo")


@dataclass(frozen=True)
class Edit:
    line: int
    col: int
    text: str  # what is typed at (line, col), then deleted


def _from_pypi(spec: str, member: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, spec], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            return z.read(member)


def _from_git(repo: str, commit: str, path: str) -> bytes:
    owner, name = repo.split("/")
    mirror = Path(MIRRORS.format(owner=owner, name=name))
    if mirror.exists():
        return subprocess.run(["git", "--git-dir", str(mirror), "show", f"{commit}:{path}"], check=True, capture_output=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "clone", "--quiet", "--filter=blob:none", "--no-checkout", f"https://github.com/{repo}", tmp], check=True)
        return subprocess.run(["git", "-C", tmp, "show", f"{commit}:{path}"], check=True, capture_output=True).stdout


def materialise() -> list[Path]:
    """Every manifest file under bench/out/lsp/files/, fetched when missing."""
    FILES.mkdir(parents=True, exist_ok=True)
    out = []
    for entry in json.loads(MANIFEST.read_text())["files"]:
        target = FILES / entry["name"]
        if not target.exists():
            print(f"[realfiles] fetching {entry['name']}", file=sys.stderr, flush=True)
            data = _from_pypi(entry["pypi"], entry["member"]) if "pypi" in entry else _from_git(entry["git"], entry["commit"], entry["path"])
            target.write_bytes(data)
        out.append(target)
    return out


def files(min_corpus_lines: int = 300) -> list[Path]:
    """The manifest's files, then the corpus files over `min_corpus_lines` lines when the corpus is present."""
    found = materialise()
    if CORPUS.is_dir():
        for path in sorted(CORPUS.rglob("*.py")):
            try:
                if path.read_text(encoding="utf-8").count("\n") > min_corpus_lines:
                    found.append(path)
            except (OSError, UnicodeDecodeError):
                continue
    return found


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def valid_edits(text: str) -> list[Edit]:
    """A `1` before the first digit of every plain decimal integer literal."""
    return [Edit(t.start[0] - 1, t.start[1], "1") for t in _tokens(text) if t.type == tokenize.NUMBER and t.string.isdigit()]


def broken_edits(text: str) -> list[Edit]:
    """`(` at the end of every line whose last token is code (not a comment, not inside a string)."""
    lines = text.split("\n")
    last: dict[int, tokenize.TokenInfo] = {}
    for t in _tokens(text):
        if t.type in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        last[t.end[0] - 1] = t
    out = []
    for line, t in last.items():
        if t.type != tokenize.COMMENT and t.start[0] == t.end[0] and t.end[1] == len(lines[line].rstrip()):
            out.append(Edit(line, t.end[1], "("))
    return out


def sample(edits: list[Edit], count: int, seed: int = 19) -> list[Edit]:
    """`count` edits spread over the file (a fixed seed: every run types the same keys)."""
    if len(edits) <= count:
        return list(edits)
    return sorted(random.Random(seed).sample(edits, count), key=lambda e: (e.line, e.col))


if __name__ == "__main__":
    for path in files():
        text = path.read_text(encoding="utf-8")
        print(f"{path}  {text.count(chr(10))} lines, {len(valid_edits(text))} valid / {len(broken_edits(text))} broken edit sites")
