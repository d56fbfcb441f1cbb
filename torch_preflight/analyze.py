"""One entry point for every front end: `analyze(source, path, config) -> Result`."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic
from torch_preflight.core.noqa import scan
from torch_preflight.core.parse import SyntaxProblem, parse
from torch_preflight.core.semantic import ModuleModel, build
from torch_preflight.core.source import SourceText
from torch_preflight.rules.base import Context, Rule
from torch_preflight.rules.registry import select_rules


@dataclass
class Result:
    path: str
    source: SourceText
    diagnostics: list[Diagnostic]
    syntax_errors: list[SyntaxProblem] = field(default_factory=list)
    model: ModuleModel | None = None
    suppressed: int = 0


@lru_cache(maxsize=64)
def _rules(select: tuple[str, ...], ignore: tuple[str, ...], extend: tuple[str, ...], preview: bool) -> tuple[Rule, ...]:
    return select_rules(select, ignore, extend, preview=preview)


def enabled_rules(config: Config, path: str = "") -> tuple[Rule, ...]:
    ignore = (*config.ignore, *config.ignores_for(path)) if path else config.ignore
    return _rules(config.select, tuple(ignore), config.extend_select, config.preview)


def analyze(text: str, path: str = "<stdin>", config: Config | None = None, *, force_recovery: bool = False) -> Result:
    """Parse, model and check one module. Never raises on bad input."""
    config = config or Config()
    source = SourceText(text)
    parsed = parse(source, force_recovery=force_recovery)
    model = build(parsed.tree, source, path)
    return check_model(model, config, path, parsed.errors)


def check_model(model: ModuleModel, config: Config, path: str, errors: list[SyntaxProblem] | None = None) -> Result:
    """Run the enabled rules over a built model (the server builds it incrementally)."""
    source = model.source
    ctx = Context(model, config)
    diagnostics: list[Diagnostic] = []
    for rule in enabled_rules(config, path):
        diagnostics.extend(rule.check(ctx))
    suppressions = scan(source)
    kept = [d for d in diagnostics if not suppressions.suppresses(d)]
    kept.sort(key=Diagnostic.sort_key)
    return Result(path, source, kept, list(errors or []), model, len(diagnostics) - len(kept))
