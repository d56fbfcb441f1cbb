"""One entry point for every front end: `analyze(source, path, config) -> Result`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic, relocate, relocate_text
from torch_preflight.core.incremental import parse_statements
from torch_preflight.core.memory import MemoryReport, ShapeMismatch
from torch_preflight.core.noqa import scan
from torch_preflight.core.notebook import Joined
from torch_preflight.core.parse import SyntaxProblem, parse, uncertain_regions
from torch_preflight.core.project import Dependency, Project, ProjectView
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
    dependencies: tuple[Dependency, ...] = ()  # other files of the project the findings depend on


def _memory(model: ModuleModel, config: Config, path: str, project: ProjectView | None = None) -> tuple[MemoryReport, ...]:
    """VRAM estimates for TPF401, only when a budget is configured and the rule is enabled."""
    if config.gpu_memory is None and config.gpu is None:
        return ()
    if not any(rule.code == "TPF401" for rule in enabled_rules(config, path)):
        return ()
    from torch_preflight.estimator import estimate, options_from_config

    try:
        return tuple(estimate(model, model.tree, options_from_config(config), project=project))
    except Exception:  # the estimate is best effort: a failure means no TPF401, never a crash
        return ()


def _shapes(model: ModuleModel, config: Config, path: str) -> tuple[ShapeMismatch, ...]:
    """Static shape mismatches for TPF501, only when the rule is enabled and the file builds an nn.Module."""
    if not any(rule.code == "TPF501" for rule in enabled_rules(config, path)):
        return ()
    text = model.source.text
    if "torch" not in text or not (any(c.is_module for c in model.classes.values()) or "Sequential(" in text):
        return ()
    from torch_preflight.estimator.shapes import check_shapes

    try:
        return tuple(check_shapes(model, model.tree, config.input_shape))
    except Exception:  # unsure means silent: a failure means no TPF501, never a crash
        return ()


@lru_cache(maxsize=64)
def _rules(select: tuple[str, ...], ignore: tuple[str, ...], extend: tuple[str, ...], preview: bool) -> tuple[Rule, ...]:
    return select_rules(select, ignore, extend, preview=preview)


def enabled_rules(config: Config, path: str = "") -> tuple[Rule, ...]:
    ignore = (*config.ignore, *config.ignores_for(path)) if path else config.ignore
    return _rules(config.select, tuple(ignore), config.extend_select, config.preview)


def runnable(rules: tuple[Rule, ...], text: str) -> list[Rule]:
    """The rules whose `RuleMeta.requires` prefilter passes on `text`."""
    lowered: str | None = None
    out: list[Rule] = []
    for rule in rules:
        needs = rule.meta.requires
        if needs:
            if lowered is None:
                lowered = text.lower()
            if not all(any(alt in lowered for alt in need.split("|")) for need in needs):
                continue
        out.append(rule)
    return out


def analyze(
    text: str,
    path: str = "<stdin>",
    config: Config | None = None,
    *,
    project: Project | None = None,
    force_recovery: bool = False,
    notebook: Joined | None = None,
) -> Result:
    """Parse, model and check one module. Never raises on bad input.

    A broken file is parsed statement by statement (`core.incremental.parse_statements`),
    as the language server does. `force_recovery` takes `core.parse`'s whole-file repair
    path even for a valid file (tests compare it with the direct path).
    `project` resolves imports into the user's other modules; pass one per run or
    session to share its cache, or leave it out for a fresh one. `notebook`: `text` is these
    joined cells; each cell parses alone (one syntax error per broken cell), and the lines
    that messages mention are named as cells and lines."""
    config = config or Config()
    source = SourceText(text)
    if notebook is not None or force_recovery:
        parsed = parse(source, force_recovery=force_recovery, cells=notebook.segments if notebook is not None else None)
    else:
        parsed = parse_statements(source)
    model = build(parsed.tree, source, path)
    result = check_model(model, config, path, parsed.errors, project=project, repaired=parsed.repaired)
    model.release()  # the model is ours alone: freed here, not by the cyclic collector
    if notebook is not None:
        result.diagnostics = [relocate(d, notebook.cite) for d in result.diagnostics]
        result.syntax_errors = [replace(p, message=relocate_text(p.message, notebook.cite)) for p in result.syntax_errors]
    return result


def check_model(
    model: ModuleModel,
    config: Config,
    path: str,
    errors: list[SyntaxProblem] | None = None,
    *,
    project: Project | None = None,
    repaired: frozenset[int] = frozenset(),
) -> Result:
    """Run the enabled rules over a built model (the server builds it incrementally).
    `repaired`: lines whose statement the error recovery dropped; findings placed (or related)
    in the outermost loop or function that holds one rest on a guess and are dropped."""
    source = model.source
    view = (project if project is not None else Project()).view()
    ctx = Context(model, config, _memory(model, config, path, view), view, _shapes(model, config, path))
    diagnostics: list[Diagnostic] = []
    for rule in runnable(enabled_rules(config, path), source.text):
        diagnostics.extend(rule.check(ctx))
    diagnostics = certain(diagnostics, model, repaired)
    suppressions = scan(source)
    kept = [d for d in diagnostics if not suppressions.suppresses(d)]
    kept.sort(key=Diagnostic.sort_key)
    return Result(path, source, kept, list(errors or []), model, len(diagnostics) - len(kept), tuple(view.used.values()))


def certain(diagnostics: list[Diagnostic], model: ModuleModel, repaired: frozenset[int]) -> list[Diagnostic]:
    """The diagnostics whose place and related places lie outside every uncertain region: the
    outermost loop or function holding a line whose statement the error recovery dropped."""
    if not repaired or model.tree is None:
        return diagnostics
    regions = uncertain_regions(model.tree, repaired)

    def inside(line: int) -> bool:
        return any(first <= line <= last for first, last in regions)

    return [d for d in diagnostics if not inside(d.span.start.line) and not any(inside(r.span.start.line) for r in d.related)]
