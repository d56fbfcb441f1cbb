"""The one explicit registry of rules, and rule selection."""

from __future__ import annotations

from collections.abc import Iterable

from torch_preflight.rules.base import Rule
from torch_preflight.rules.data import overlap_leakage, preprocessing_leakage, selection_on_test_split
from torch_preflight.rules.memory import vram_exceeds_budget
from torch_preflight.rules.model import (
    double_softmax,
    forward_called_directly,
    layer_defined_but_unused,
    missing_super_init,
    shape_mismatch,
    unregistered_submodules,
)
from torch_preflight.rules.security import unsafe_torch_load
from torch_preflight.rules.training import (
    accumulation_cadence_mismatch,
    accumulation_loss_not_scaled,
    backward_inside_autocast,
    distributed_sampler_without_set_epoch,
    eval_loop_without_no_grad,
    grad_scaler_misuse,
    graph_tensor_stored,
    loss_accumulated_with_graph,
    missing_eval_mode,
    missing_train_mode,
    missing_zero_grad,
    optimizer_created_in_loop,
    retain_graph_in_loop,
    scheduler_before_optimizer_step,
    zero_grad_between_backward_and_step,
)

ALL_RULES: tuple[Rule, ...] = tuple(
    Rule.from_module(module)
    for module in (
        missing_zero_grad,
        zero_grad_between_backward_and_step,
        accumulation_cadence_mismatch,
        accumulation_loss_not_scaled,
        loss_accumulated_with_graph,
        graph_tensor_stored,
        eval_loop_without_no_grad,
        missing_eval_mode,
        missing_train_mode,
        optimizer_created_in_loop,
        scheduler_before_optimizer_step,
        retain_graph_in_loop,
        distributed_sampler_without_set_epoch,
        grad_scaler_misuse,
        backward_inside_autocast,
        unregistered_submodules,
        missing_super_init,
        double_softmax,
        forward_called_directly,
        layer_defined_but_unused,
        preprocessing_leakage,
        selection_on_test_split,
        overlap_leakage,
        unsafe_torch_load,
        vram_exceeds_budget,
        shape_mismatch,
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
