"""Typed editor settings: initializationOptions / workspace configuration over pyproject.toml.

Keys (camelCase as editors send them, snake/kebab accepted): select, ignore, gpuMemory,
gpu, dtype, batchSize, inlayHints.enabled (or inlayHints: bool), debounce (ms). A bad value
is reported (the caller shows it with window/showMessage) and that key falls back to its
default; the other keys still apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch_preflight.core.config import Config, ConfigError, load_config, parse_size
from torch_preflight.rules.registry import SelectionError, validate_codes

SETTINGS_SECTION = "torchPreflight"  # the workspace/configuration section clients answer for
DTYPES = ("float32", "float16", "bfloat16", "fp32", "fp16", "bf16")


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    gpu_memory: int | None = None
    gpu: str | None = None
    dtype: str | None = None
    batch_size: int | None = None
    inlay_hints: bool = True
    debounce_ms: int = 150

    def config_for(self, path: str) -> tuple[Config, list[str]]:
        """pyproject's [tool.torch-preflight] for `path`, with these settings over it."""
        problems: list[str] = []
        try:
            base = load_config(Path(path).parent) if path else Config()
        except (ConfigError, OSError) as exc:
            problems.append(str(exc))
            base = Config()
        return base.merged(
            select=self.select, ignore=self.ignore, gpu_memory=self.gpu_memory, gpu=self.gpu, dtype=self.dtype,
            batch_size=self.batch_size,
        ), problems


def _get(raw: dict[str, Any], *names: str) -> Any:
    for name in names:
        if name in raw:
            return raw[name]
    return None


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """Settings from a JSON object; returns (settings, warnings). Never raises."""
    if raw is None:
        return Settings(), []
    if not isinstance(raw, dict):
        return Settings(), [f"torch-preflight settings must be an object, got {type(raw).__name__}"]
    for section in (SETTINGS_SECTION, "torch-preflight"):  # a client that sends the whole section tree
        if isinstance(raw.get(section), dict):
            raw = raw[section]
            break
    values: dict[str, Any] = {}
    problems: list[str] = []

    def codes(key: str, value: Any) -> tuple[str, ...] | None:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"`{key}` must be a list of rule codes")
        result = tuple(v.strip().upper() for v in value)
        try:
            validate_codes(result, key)
        except SelectionError as exc:
            raise ConfigError(str(exc)) from None
        return result

    checks: list[tuple[str, tuple[str, ...], Any]] = [
        ("select", ("select",), lambda v: codes("select", v)),
        ("ignore", ("ignore",), lambda v: codes("ignore", v)),
        ("gpu_memory", ("gpuMemory", "gpu_memory", "gpu-memory"), parse_size),
        ("gpu", ("gpu",), _gpu),
        ("dtype", ("dtype",), _dtype),
        ("batch_size", ("batchSize", "batch_size", "batch-size"), _positive("batchSize")),
        ("debounce_ms", ("debounce", "debounceMs", "debounce_ms"), _debounce),
    ]
    for attr, names, check in checks:
        value = _get(raw, *names)
        if value is None:
            continue
        try:
            values[attr] = check(value)
        except (ConfigError, ValueError, TypeError) as exc:
            problems.append(f"torch-preflight: ignoring setting `{names[0]}`: {exc}")
    hints = _get(raw, "inlayHints", "inlay_hints")
    if isinstance(hints, dict):
        hints = hints.get("enabled")
    if hints is not None:
        if isinstance(hints, bool):
            values["inlay_hints"] = hints
        else:
            problems.append(f"torch-preflight: ignoring setting `inlayHints.enabled`: must be true or false, got {hints!r}")
    return Settings(**values), problems


def _gpu(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("must be a GPU name such as 'a100-80gb'")
    return value.strip()


def _dtype(value: Any) -> str:
    if value not in DTYPES:
        raise ConfigError(f"must be one of float32, float16, bfloat16, got {value!r}")
    return str(value)


def _positive(key: str) -> Any:
    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"must be a positive integer, got {value!r}")
        return value

    return check


def _debounce(value: Any) -> int:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 10_000:
        raise ConfigError(f"must be a number of milliseconds between 0 and 10000, got {value!r}")
    return int(value)


__all__ = ["Settings", "parse_settings"]
