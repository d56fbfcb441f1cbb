"""torch-preflight's rules: one module per rule, registered in `registry`."""

from torch_preflight.rules.base import Context, Rule, RuleMeta
from torch_preflight.rules.registry import ALL_RULES, BY_CODE, select_rules

__all__ = ["ALL_RULES", "BY_CODE", "Context", "Rule", "RuleMeta", "select_rules"]
