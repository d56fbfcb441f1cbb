"""The YAML a training configuration is written in (OmegaConf, Hydra), read as data: a small subset, never a loader.

What it reads: block mappings by indentation, block sequences (`- item`), flow sequences and mappings of scalars
(`[64, 128]`, `{lr: 0.1}`), comments, and the scalars as OmegaConf reads them: integers, floats (`0.1`, `1e-4`), `true` /
`false`, `null` / `~`, plain and quoted strings. A value it cannot be sure of is `UNKNOWN_SCALAR` (an interpolation
such as `${model.dim}`, `yes`/`no`/`on`/`off`, a string with escapes); a construct outside the subset (anchors,
aliases, tags, block scalars `|` `>`, several documents, a line it cannot place) makes the whole file unreadable
(`parse` returns None), so that nothing is read from a file half understood.
"""

from __future__ import annotations

import re
from typing import Any

UNKNOWN_SCALAR = object()  # a value present in the file that the subset does not read
_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"[-+]?(\d[\d_]*\.[\d_]*([eE][-+]?\d+)?|\d[\d_]*[eE][-+]?\d+|\.\d[\d_]*([eE][-+]?\d+)?)$")
_OTHER = re.compile(r"[-+]?(0[0-9xob]|\.(inf|nan)$|\d{4}-\d\d?-\d\d?)", re.I)
_KEY = re.compile(r"([A-Za-z_][\w.-]*|\"[^\"\\]*\"|'[^']*')\s*:(\s+|$)")


class Unreadable(Exception):
    pass


def parse(text: str) -> Any | None:
    """The file's data (dicts, lists, scalars, `UNKNOWN_SCALAR` where a value is not read); None outside the subset."""
    lines: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        if line.strip() in ("---", "...") and not lines:
            continue  # a document start marker before any content
        if "\t" in line[: len(line) - len(line.lstrip())]:
            return None
        lines.append((len(line) - len(line.lstrip()), line.strip()))
    if not lines:
        return {}
    try:
        value, end = _block(lines, 0, lines[0][0])
    except Unreadable:
        return None
    return value if end == len(lines) else None


def _strip_comment(line: str) -> str:
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        return _sequence(lines, i, indent)
    return _mapping(lines, i, indent)


def _mapping(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        m = _KEY.match(lines[i][1])
        if m is None:
            raise Unreadable(lines[i][1])
        key = m.group(1).strip("'\"")
        rest = lines[i][1][m.end():].strip()
        if key in out:
            raise Unreadable(f"duplicate key {key}")
        i += 1
        if rest:
            out[key] = _scalar_or_flow(rest)
        elif i < len(lines) and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1].startswith("-"))):
            out[key], i = _block(lines, i, lines[i][0])
        else:
            out[key] = None
    if i < len(lines) and lines[i][0] > indent:
        raise Unreadable(lines[i][1])
    return out, i


def _sequence(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    while i < len(lines) and lines[i][0] == indent and (lines[i][1].startswith("- ") or lines[i][1] == "-"):
        rest = lines[i][1][1:].strip()
        i += 1
        if not rest:
            if i < len(lines) and lines[i][0] > indent:
                item, i = _block(lines, i, lines[i][0])
                out.append(item)
            else:
                out.append(None)
        elif _KEY.match(rest):  # `- key: value` (a mapping in the sequence): its other keys are indented under it
            inner = [(indent + 2, rest)]
            while i < len(lines) and lines[i][0] > indent:
                inner.append(lines[i])
                i += 1
            item, end = _mapping(inner, 0, indent + 2)
            if end != len(inner):
                raise Unreadable(rest)
            out.append(item)
        else:
            out.append(_scalar_or_flow(rest))
    return out, i


def _scalar_or_flow(text: str) -> Any:
    if text[0] in "&*!|>%@`":
        raise Unreadable(text)  # anchors, aliases, tags, block scalars, directives, reserved
    if text.startswith("["):
        if not text.endswith("]"):
            raise Unreadable(text)
        return [_scalar(part.strip()) for part in _split_flow(text[1:-1])]
    if text.startswith("{"):
        if not text.endswith("}"):
            raise Unreadable(text)
        out: dict[str, Any] = {}
        for part in _split_flow(text[1:-1]):
            key, sep, value = part.partition(":")
            if not sep or not key.strip():
                raise Unreadable(text)
            out[key.strip().strip("'\"")] = _scalar(value.strip())
        return out
    return _scalar(text)


def _split_flow(text: str) -> list[str]:
    if any(c in text for c in "[]{}\"'"):
        raise Unreadable(text)  # nested or quoted flow items
    return [part for part in text.split(",") if part.strip()] if text.strip() else []


def _scalar(text: str) -> Any:
    if not text or text in ("null", "Null", "NULL", "~"):
        return None
    if text[0] in "&*!|>%@`[]{}":
        raise Unreadable(text)
    if text[0] == "'":
        if not text.endswith("'") or len(text) < 2:
            raise Unreadable(text)
        return text[1:-1].replace("''", "'")
    if text[0] == '"':
        if not text.endswith('"') or len(text) < 2:
            raise Unreadable(text)
        return UNKNOWN_SCALAR if "\\" in text or "${" in text else text[1:-1]
    if "${" in text:
        return UNKNOWN_SCALAR  # an interpolation, resolved by OmegaConf when it is read
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text.lower() in ("yes", "no", "on", "off", "y", "n"):
        return UNKNOWN_SCALAR  # YAML 1.1 booleans, or strings, depending on the loader
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text):
        return float(text.replace("_", ""))
    if _OTHER.match(text) or ":" in text:
        return UNKNOWN_SCALAR  # octal, hexadecimal, sexagesimal, dates, inf and nan: the loader decides
    return text
