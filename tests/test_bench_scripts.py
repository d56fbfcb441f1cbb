"""The benchmark scripts of bench/realworld (stdlib only): the harder mutation kinds, strict scoring,
and the blind corpus's notebook line count and before/after diff."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "realworld"))

import blind
import mutate
import score

GAN = """\
import torch

def train(netD, netG, optD, optG, loader):
    for real in loader:
        netD.zero_grad()
        errD = netD(real).mean()
        errD.backward()
        optD.step()
        netG.zero_grad()
        errG = -netD(netG(real)).mean()
        errG.backward()
        optG.step()
"""

HELPERS = """\
import torch

def step(model, opt, x):
    model.train()
    opt.zero_grad()
    loss = model(x).sum()
    loss.backward()
    opt.step()

@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    for x in loader:
        model(x)

for epoch in range(3):
    loader.sampler.set_epoch(epoch)
    for x in loader:
        step(model, opt, x)
    evaluate(model, val_loader)
"""


def mutants(text: str, kind: str) -> list[mutate.Mutant]:
    return list(mutate.HARD_OPERATORS[kind](mutate.Index(text)))


def test_gan_clears_each_give_a_mutant_without_that_clear():
    found = mutants(GAN, "gan_drop_zero_grad")
    assert sorted(m.orig_line for m in found) == [5, 9]
    for m in found:
        ast.parse(m.text)
        assert m.text.count("zero_grad()") == 1
        assert GAN.splitlines()[m.orig_line - 1] not in m.text.splitlines()


def test_single_clear_loop_is_not_a_gan_site():
    one = GAN.replace("        netG.zero_grad()\n", "")
    assert mutants(one, "gan_drop_zero_grad") == []


@pytest.mark.parametrize(("kind", "gone", "line"), [
    ("helper_drop_zero_grad", "    opt.zero_grad()", 5),
    ("helper_drop_train", "    model.train()", 4),
    ("remove_no_grad_decorator", "@torch.no_grad()", 10),
    ("delete_set_epoch_chain", "    loader.sampler.set_epoch(epoch)", 17),
])
def test_harder_kinds_delete_the_site_and_point_at_it(kind, gone, line):
    (m,) = mutants(HELPERS, kind)
    assert gone not in m.text.splitlines()
    assert m.line == line  # the mutant's line where the deleted statement was (or the def, for a decorator)
    ast.parse(m.text)


def test_helper_kinds_need_a_loop_that_calls_the_helper():
    uncalled = HELPERS.replace("        step(model, opt, x)\n", "        pass\n")
    assert mutants(uncalled, "helper_drop_zero_grad") == []


def test_strict_window_counts_the_line_or_a_related_location():
    findings = [("TPF001", 10, []), ("TPF001", 40, [21]), ("TPF002", 20, [])]
    assert score.near(findings, 13, ("TPF001",)) == 1
    assert score.near(findings, 14, ("TPF001",)) == 0
    assert score.near(findings, 20, ("TPF001",)) == 1  # through the related line 21
    assert score.near(findings, 20, ("TPF002",)) == 1


def test_notebook_lines_count_code_cells_only():
    nb = {"cells": [{"cell_type": "markdown", "source": ["a\n", "b"]},
                    {"cell_type": "code", "source": ["x = 1\n", "y = 2"]},
                    {"cell_type": "code", "source": ""}]}
    assert blind.notebook_code_lines(json.dumps(nb).encode()) == 2
    assert blind.notebook_code_lines(b"not json") is None


def test_diff_pairs_a_moved_finding_and_reports_a_lost_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(blind, "TRIAGE", tmp_path / "none.json")
    kept = {"path": "a.py", "cell": None, "line": 3, "code": "TPF007", "text": "for x in loader:", "message": ""}
    lost = {"path": "b.py", "cell": None, "line": 9, "code": "TPF005", "text": "total += loss", "message": ""}
    moved = {**kept, "line": 2, "text": "def evaluate(model):"}
    for name, findings in (("before", [kept, lost]), ("after", [moved])):
        (tmp_path / f"{name}.json").write_text(json.dumps({"version": name, "lines": 50000, "findings": findings}))
    blind.main(["diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")])
    out = capsys.readouterr().out
    assert "LOST (in before, not after): 1" in out and "b.py:9 TPF005" in out
    assert "NEW (in after, not before): 0" in out
    assert "a.py TPF007: 3 -> 2" in out
