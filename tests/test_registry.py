from __future__ import annotations

import re

import pytest
from conftest import ROOT
from torch_preflight.rules.base import DOC_SECTIONS
from torch_preflight.rules.docs import expected_pages, missing_sections
from torch_preflight.rules.registry import ALL_RULES, BY_CODE, SelectionError, select_rules


def test_codes_and_names_are_unique() -> None:
    codes = [r.code for r in ALL_RULES]
    names = [r.meta.name for r in ALL_RULES]
    assert len(codes) == len(set(codes))
    assert len(names) == len(set(names))


def test_codes_are_well_formed() -> None:
    for rule in ALL_RULES:
        assert re.fullmatch(r"TPF\d{3}", rule.code), rule.code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.meta.name), rule.meta.name


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_docstring_has_every_section(rule) -> None:
    assert not missing_sections(rule), f"{rule.code} lacks sections {missing_sections(rule)} of {DOC_SECTIONS}"


def test_generated_docs_are_current() -> None:
    folder = ROOT / "docs" / "rules"
    stale = [name for name, text in expected_pages().items() if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != text]
    assert not stale, f"docs/rules is stale for {stale}: run `make docs`"


def test_prefix_selection() -> None:
    assert {r.code for r in select_rules(["TPF00"])} == {c for c in BY_CODE if c.startswith("TPF00")}
    assert "TPF001" not in {r.code for r in select_rules(["TPF0"], ["TPF001"])}
    assert {r.code for r in select_rules(["missing-zero-grad"])} == {"TPF001"}


def test_unknown_selector_is_an_error_naming_it() -> None:
    with pytest.raises(SelectionError, match="TPF999"):
        select_rules(["TPF999"])


def test_default_set_excludes_default_disabled_rules() -> None:
    default = {r.code for r in select_rules()}
    for rule in ALL_RULES:
        assert (rule.code in default) == (rule.meta.default_enabled and rule.meta.status.value == "stable")
