"""The one explicit registry of rules, and rule selection."""

from __future__ import annotations

from collections.abc import Iterable

from torch_preflight.rules.base import Rule
from torch_preflight.rules.training import eval_loop_without_no_grad, loss_accumulated_with_graph, missing_zero_grad

ALL_RULES: tuple[Rule, ...] = tuple(
    Rule.from_module(module)
    for module in (
        missing_zero_grad,
        loss_accumulated_with_graph,
        eval_loop_without_no_grad,
    )
)

BY_CODE: dict[str, Rule] = {rule.code: rule for rule in ALL_RULES}
BY_NAME: dict[str, Rule] = {rule.meta.name: rule for rule in ALL_RULES}


class SelectionError(ValueError):
    """A code or prefix in select/ignore that matches no rule."""


def _expand(selector: str, key: str) -> set[str]:
    selector = selector.strip()
    if selector.upper() == "ALL":
        return set(BY_CODE)
    if selector in BY_NAME:
        return {BY_NAME[selector].code}
    matched = {code for code in BY_CODE if code.startswith(selector.upper())}
    if not matched:
        raise SelectionError(f"`{selector}` in {key} matches no rule (see `torch-preflight rules`)")
    return matched


def select_rules(
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    extend_select: Iterable[str] = (),
    *,
    preview: bool = False,
) -> tuple[Rule, ...]:
    """Rules enabled by select/ignore codes and prefixes (ruff's semantics)."""
    select = tuple(select)
    if select:
        enabled: set[str] = set()
        for selector in select:
            enabled |= _expand(selector, "select")
    else:
        enabled = {r.code for r in ALL_RULES if r.meta.default_enabled and (preview or r.meta.status.value == "stable")}
    for selector in extend_select:
        enabled |= _expand(selector, "extend-select")
    for selector in ignore:
        enabled -= _expand(selector, "ignore")
    return tuple(rule for rule in ALL_RULES if rule.code in enabled)


def validate_codes(codes: Iterable[str], key: str) -> None:
    for code in codes:
        _expand(code, key)
