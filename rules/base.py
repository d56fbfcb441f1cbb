"""The rule framework: metadata, the context a rule checks, and helpers to report."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from types import ModuleType

from torch_preflight.core.config import Config
from torch_preflight.core.diagnostics import Diagnostic, Fix, Related, Severity
from torch_preflight.core.memory import MemoryReport, ShapeMismatch
from torch_preflight.core.project import Project, ProjectView
from torch_preflight.core.semantic import ModuleModel
from torch_preflight.core.source import SourceText, Span
from torch_preflight.core.training import TrainingModel

# The rule pages `make docs` writes: docs/rules/ beside rules/ in a checkout, and the same
# place beside this package in a wheel (torch_preflight/docs/rules/, shipped as package data),
# so a rule's link is a local file that exists without a network.
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs" / "rules"
DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")


class Status(StrEnum):
    STABLE = "stable"
    PREVIEW = "preview"


@dataclass(frozen=True)
class RuleMeta:
    code: str
    name: str  # named after the pitfall, e.g. eval-loop-without-no-grad
    message: str  # one-line summary used in listings
    fix_title: str | None
    severity: Severity
    status: Status = Status.STABLE
    default_enabled: bool = True
    # Prefilter, checked by analyze() before the rule runs: every entry is "a|b|c", and the
    # rule runs only when, for every entry, one of its alternatives occurs in the source
    # (a plain substring test on the lower-cased text, so write them in lower case). It must
    # over-approximate: a file the rule could flag always passes. Empty: always run.
    requires: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return doc_url(self.code)


def doc_page(code: str) -> Path:
    """Where the page of the rule `code` is (see DOCS_DIR)."""
    return DOCS_DIR / f"{code}.md"


def doc_url(code: str) -> str:
    return doc_page(code).as_uri()


@dataclass
class Context:
    """What a rule sees: the module model, the training-step model and the config."""

    model: ModuleModel
    config: Config
    memory: tuple[MemoryReport, ...] = ()  # VRAM estimates, computed by analyze() only when a budget is configured
    project: ProjectView = field(default_factory=lambda: Project().view())  # the user's other modules
    shapes: tuple[ShapeMismatch, ...] = ()  # static shape mismatches, computed by analyze() only when TPF501 is enabled

    @cached_property
    def training(self) -> TrainingModel:
        return TrainingModel(self.model, self.project)

    @property
    def source(self) -> SourceText:
        return self.model.source


Check = Callable[[Context], Iterable[Diagnostic]]


@dataclass(frozen=True)
class Rule:
    meta: RuleMeta
    check: Check
    doc: str

    @classmethod
    def from_module(cls, module: ModuleType) -> Rule:
        return cls(module.META, module.check, module.__doc__ or "")

    @property
    def code(self) -> str:
        return self.meta.code


def report(
    meta: RuleMeta,
    span: Span,
    message: str,
    fix: Fix | None = None,
    related: Iterable[Related] = (),
    data: dict[str, str] | None = None,
) -> Diagnostic:
    return Diagnostic(
        code=meta.code,
        name=meta.name,
        message=message,
        span=span,
        severity=meta.severity,
        fix=fix,
        related=tuple(related),
        data=tuple(sorted((data or {}).items())),
    )
