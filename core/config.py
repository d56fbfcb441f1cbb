"""Configuration: `[tool.torch-preflight]` in the nearest pyproject.toml, then CLI/LSP overrides."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

DEFAULT_EXCLUDE = (".venv", "venv", ".git", "build", "dist", "node_modules", "__pycache__", ".tox", ".mypy_cache", ".ruff_cache")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ()  # empty: the default rule set
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    preview: bool = False
    gpu_memory: int | None = None  # bytes
    gpu: str | None = None
    dtype: str | None = None
    batch_size: int | None = None
    input_shape: tuple[int, ...] | None = None  # one sample without the batch dim, e.g. (3, 224, 224): TPF501, the estimator
    values: tuple[tuple[str, str], ...] = ()  # `set = {ntokens = 33278}`: what the estimate takes for these assignments
    root: Path | None = None  # the folder of the pyproject.toml it came from
    source: str = "defaults"  # where it came from, for messages

    def ignores_for(self, path: str) -> tuple[str, ...]:
        """Codes ignored for one file by `per-file-ignores` (glob patterns, root-relative)."""
        rel = path
        if self.root is not None:
            try:
                rel = str(Path(path).resolve().relative_to(self.root.resolve()))
            except (ValueError, OSError):
                rel = path
        codes: list[str] = []
        for pattern, ignored in self.per_file_ignores:
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(Path(rel).name, pattern):
                codes.extend(ignored)
        return tuple(codes)

    def excluded(self, path: Path) -> bool:
        patterns = (*(self.exclude or DEFAULT_EXCLUDE), *self.extend_exclude)
        return any(fnmatch.fnmatch(path.name, p) for p in patterns)

    def merged(self, **overrides: Any) -> Config:
        """A copy with the given non-None overrides applied (CLI flags, editor settings)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_KEYS = {
    "select", "ignore", "extend-select", "per-file-ignores", "exclude", "extend-exclude", "preview",
    "gpu-memory", "gpu", "dtype", "batch-size", "input-shape", "set",
}


def parse_size(value: str | int) -> int:
    """'24GiB', '80GB', '512 MiB', 1024 -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(f"memory size must be positive, got {value}")
        return value
    text = str(value).strip().replace(" ", "")
    units = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
             "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}
    number = text.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = text[len(number) :].lower()
    try:
        size = float(number)
    except ValueError:
        raise ConfigError(f"cannot read memory size {value!r} (try '24GiB')") from None
    if unit not in units or size <= 0:
        raise ConfigError(f"cannot read memory size {value!r} (try '24GiB')")
    return int(size * units[unit])


def _codes(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"`{key}` must be a list of rule codes, got {value!r}")
    return tuple(v.strip().upper() for v in value)


def config_from_table(table: dict[str, Any], *, root: Path | None = None, source: str = "pyproject.toml") -> Config:
    """Build a Config from a `[tool.torch-preflight]` table; unknown keys are errors."""
    if not isinstance(table, dict):
        raise ConfigError("[tool.torch-preflight] must be a table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key `{unknown[0]}` in [tool.torch-preflight] ({source}); known keys: {', '.join(sorted(_KEYS))}")
    kwargs: dict[str, Any] = {}
    for key in ("select", "ignore", "extend-select"):
        if key in table:
            kwargs[key.replace("-", "_")] = _codes(key, table[key])
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError("`per-file-ignores` must be a table of glob = [codes]")
        kwargs["per_file_ignores"] = tuple((pattern, _codes(f"per-file-ignores.{pattern}", codes)) for pattern, codes in pfi.items())
    for key in ("exclude", "extend-exclude"):
        if key in table:
            value = table[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"`{key}` must be a list of glob patterns")
            kwargs[key.replace("-", "_")] = tuple(value)
    if "preview" in table:
        if not isinstance(table["preview"], bool):
            raise ConfigError("`preview` must be true or false")
        kwargs["preview"] = table["preview"]
    if "gpu-memory" in table:
        kwargs["gpu_memory"] = parse_size(table["gpu-memory"])
    if "gpu" in table:
        if not isinstance(table["gpu"], str):
            raise ConfigError("`gpu` must be a GPU name such as 'a100-80gb'")
        kwargs["gpu"] = table["gpu"]
    if "dtype" in table:
        if table["dtype"] not in ("float32", "float16", "bfloat16", "fp32", "fp16", "bf16"):
            raise ConfigError(f"`dtype` must be one of float32, float16, bfloat16, got {table['dtype']!r}")
        kwargs["dtype"] = table["dtype"]
    if "batch-size" in table:
        if not isinstance(table["batch-size"], int) or isinstance(table["batch-size"], bool) or table["batch-size"] <= 0:
            raise ConfigError("`batch-size` must be a positive integer")
        kwargs["batch_size"] = table["batch-size"]
    if "input-shape" in table:
        shape = table["input-shape"]
        if isinstance(shape, str):
            shape = [int(v) if v.strip().isdigit() else v for v in shape.replace("x", ",").split(",")]
        if not isinstance(shape, list) or not shape or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape):
            raise ConfigError("`input-shape` must be a list of positive integers without the batch dim, e.g. [3, 224, 224]")
        kwargs["input_shape"] = tuple(shape)
    if "set" in table:
        values = table["set"]
        if not isinstance(values, dict) or not all(isinstance(v, (str, int, float, bool, list)) for v in values.values()):
            raise ConfigError("`set` must be a table of NAME = value, e.g. set = {ntokens = 33278}")
        # a string is VALUE's source as on the command line (`--set NAME=VALUE`); other TOML values are literals
        kwargs["values"] = tuple((str(k), v if isinstance(v, str) else repr(v)) for k, v in values.items())
    return Config(root=root, source=source, **kwargs)


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in (start, *start.parents) if start.is_dir() else start.parents:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path) -> Config:
    """The configuration that applies at `start` (a file or folder); defaults if none."""
    pyproject = find_pyproject(start)
    if pyproject is None:
        return Config()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {pyproject}: {exc}") from None
    table = data.get("tool", {}).get("torch-preflight")
    if table is None:
        return Config(root=pyproject.parent)
    return config_from_table(table, root=pyproject.parent, source=str(pyproject))


__all__ = ["Config", "ConfigError", "config_from_table", "load_config", "parse_size"]
