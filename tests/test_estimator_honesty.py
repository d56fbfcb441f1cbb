"""An estimate with unknown parts is a lower bound, said so everywhere: text, JSON, exit status, inlay hints (issue 18)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import textwrap
from pathlib import Path

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source, ops

from torch_preflight import estimate_command

HEAD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

"""

STEP = """
model = Net()
optimizer = torch.optim.Adam(model.parameters())
for step in range(3):
    x = torch.randn(8, 64)
    y = torch.randint(0, 10, (8,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
"""

KNOWN = HEAD + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))
""" + STEP

# a torch.nn layer the estimator does not model (AdaptiveLogSoftmaxWithLoss): named as unknown, never guessed
UNMODELLED = HEAD + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256)
        self.odd = nn.AdaptiveLogSoftmaxWithLoss(256, 10, [4])
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(self.odd(self.fc1(x)))
""" + STEP


def one(src: str, **opts: object) -> MemoryReport:
    (report,) = estimate_source(textwrap.dedent(src), "train.py", EstimateOptions(device="cpu", **opts))  # type: ignore[arg-type]
    return report


def cli(tmp_path: Path, src: str, *argv: str, name: str = "train.py") -> tuple[int, str]:
    path = tmp_path / name
    path.write_text(src, encoding="utf-8")
    parser = argparse.ArgumentParser()
    estimate_command.add_arguments(parser)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = estimate_command.run(parser.parse_args([str(path), *argv]))
    return code, out.getvalue()


def test_a_complete_estimate_prints_its_peak_and_exits_0(tmp_path: Path) -> None:
    report = one(KNOWN)
    assert report.complete and report.unknowns == ()
    code, out = cli(tmp_path, KNOWN, "--device", "cpu")
    assert code == estimate_command.EXIT_OK
    assert "Peak " in out and "at least" not in out and "Unknown" not in out


def test_an_unmodelled_layer_makes_the_peak_a_lower_bound(tmp_path: Path) -> None:
    report = one(UNMODELLED)
    assert not report.complete
    (odd,) = report.unknown_layers
    assert odd.name == "odd" and "AdaptiveLogSoftmaxWithLoss is not modelled" in (odd.unknown or "")
    assert odd.activation_bytes is None
    assert any("AdaptiveLogSoftmaxWithLoss" in u.text for u in report.unknowns)
    assert not any("AdaptiveLogSoftmaxWithLoss" in a.text for a in report.assumptions)  # unknowns are not assumptions
    code, out = cli(tmp_path, UNMODELLED, "--device", "cpu")
    assert code == estimate_command.EXIT_INCOMPLETE == 3
    assert "Peak at least " in out and "1 layer and" in out and "unknown" in out
    assert "max_memory_allocated" not in out  # --device cpu: the CPU's peak is not what a CUDA API reports


def test_json_complete_only_when_nothing_is_unknown_and_lines_are_1_based(tmp_path: Path) -> None:
    code, out = cli(tmp_path, UNMODELLED, "--device", "cpu", "--format", "json")
    assert code == 3
    (model,) = json.loads(out)["models"]
    assert model["complete"] is False and model["peak_is_lower_bound"] is True and model["unknowns"]
    odd = next(layer for layer in model["layers"] if layer["name"] == "odd")
    assert odd["line"] == 9 and odd["col"] == 20  # the call `nn.Adaptive...(`: line 9, column 20, 1-based
    assert model["model_line"] == UNMODELLED.splitlines().index("model = Net()") + 1
    code, out = cli(tmp_path, KNOWN, "--device", "cpu", "--format", "json")
    (model,) = json.loads(out)["models"]
    assert code == 0 and model["complete"] is True and model["unknowns"] == [] and model["peak_is_lower_bound"] is False
    adam = next(a for a in model["assumptions"] if "Adam" in a["text"])
    assert f"train.py:{adam['line']}" in adam["text"]  # the JSON line is the line the text cites


def test_budget_with_a_lower_bound(tmp_path: Path) -> None:
    """Over the budget even as a lower bound: does not fit (1); under it: not known (3), never 'fits'."""
    code, out = cli(tmp_path, UNMODELLED, "--device", "cpu", "--gpu-memory", "1KiB")
    assert code == 1 and "does not fit" in out
    code, out = cli(tmp_path, UNMODELLED, "--device", "cpu", "--gpu-memory", "80GiB")
    assert code == 3 and "not known" in out and "largest batch size" not in out
    assert one(UNMODELLED, budget_bytes=80 * 2**30).fits is None


def test_an_unknown_batch_size_is_not_also_an_assumed_one() -> None:
    src = HEAD + """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(x)

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dataset = torch.utils.data.TensorDataset(torch.randn(100, 64), torch.randint(0, 10, (100,)))
loader = torch.utils.data.DataLoader(dataset, batch_size=get_batch_size())
for x, y in loader:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
"""
    report = one(src)
    assert not report.complete
    assert any("batch_size is not known" in u.text for u in report.unknowns)
    assert not any("batch_size=" in a.text for a in report.assumptions)
    known = one(src, batch_size=32)  # --batch-size answers it
    assert known.complete and [a.text for a in known.assumptions if a.text.startswith("batch_size")] == ["batch_size=32 (--batch-size)"]


ATTN = HEAD + """\
class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.flash = FLASH
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(1024, 1024)).view(1, 1, 1024, 1024))

    def forward(self, x):
        q, k, v = self.qkv(x).split(64, dim=2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)).masked_fill(self.bias[:, :, :16, :16] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return y

model = Attn()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(4, 16, 64)
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
"""


def test_an_unknown_condition_is_taken_the_same_way_in_init_and_forward() -> None:
    """`if not self.flash:` in __init__ and `if self.flash:` in forward: one guess about self.flash, not two."""
    report = one(ATTN.replace("FLASH", "read_flag()"))
    # __init__ took `not self.flash` as true: the mask exists, and forward must then use it (the else branch)
    conditions = [u.text for u in report.unknowns if "condition" in u.text]
    assert any("took its first branch" in t for t in conditions) and any("took its second branch" in t for t in conditions)
    assert not any("internal error" in u.text or "bias" in u.text for u in report.unknowns)
    # a feature test on torch is read as torch 2.x: flash is True, no mask buffer, and nothing is unknown
    flash = one(ATTN.replace("FLASH", 'hasattr(F, "scaled_dot_product_attention")'))
    assert flash.complete, flash.unknowns
    assert flash.breakdown["parameters"] == (64 * 192 + 192) * 4  # no 4 MiB mask buffer


def test_an_internal_error_is_an_unknown_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ops.torch_function

    def broken(it, short, name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if short == "relu":
            raise KeyError("boom")
        return real(it, short, name, *args, **kwargs)

    monkeypatch.setattr(ops, "torch_function", broken)
    report = one(KNOWN)
    assert not report.complete
    assert any(u.text.startswith("internal error in estimator (KeyError") for u in report.unknowns)
    assert not any("KeyError" in a.text for a in report.assumptions)


def test_a_failed_estimate_is_reported_not_hidden(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import torch_preflight.estimator as estimator

    def crash(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyError("boom")

    monkeypatch.setattr(estimator, "_estimate", crash)
    (report,) = estimate_source(KNOWN, "train.py", EstimateOptions(device="cpu"))
    assert not report.complete and "internal error in estimator (KeyError" in report.unknowns[0].text
    code, out = cli(tmp_path, KNOWN, "--device", "cpu")
    assert code == 3 and "internal error in estimator" in out and "not estimated" in out
    assert "no nn.Module model found" not in out


def test_text_explains_the_model_row_and_freed_activations(tmp_path: Path) -> None:
    code, out = cli(tmp_path, KNOWN, "--device", "cpu", "--optimizer", "adam")
    assert code == 0
    assert "(Net itself)" in out and "the parameters Net holds directly" in out
    report = one(KNOWN)  # Adam's step is the peak: backward has freed what forward saved, and the text says so
    assert report.phase == "step" and report.breakdown["activations"] == 0 and report.saved_activation_bytes == 8 * 256 * 4
    assert "during the optimizer step" in out and "forward saves 8.0 KiB" in out and "backward has freed them all" in out


def test_assumptions_from_another_module_cite_that_module(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "data.py").write_text(textwrap.dedent("""\
        import torch

        def make_loader():
            ds = torch.utils.data.TensorDataset(torch.randn(100, 64), torch.randint(0, 10, (100,)))
            return torch.utils.data.DataLoader(ds, batch_size=16)
        """))
    src = KNOWN.split("model = Net()")[0] + textwrap.dedent("""\
        from data import make_loader
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in make_loader():
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        """)
    script = tmp_path / "train.py"
    script.write_text(src)
    (report,) = estimate_source(src, str(script), EstimateOptions(device="cpu"))
    batch = [a for a in report.assumptions if a.text.startswith("batch_size=16")]
    assert batch and batch[0].text == "batch_size=16 from data.py:5" and batch[0].line is None


def test_inlay_hints_mark_lower_bounds_and_unknown_layers() -> None:
    from torch_preflight.server.convert import hover_markdown, layer_label, total_label

    report = one(UNMODELLED)
    assert total_label(report).startswith("  peak ≥ ") and "unknown" in total_label(report)
    assert layer_label(report.unknown_layers[0]).startswith("  ? unknown")
    assert "at least" in hover_markdown(report) and "Unknown" in hover_markdown(report)
    assert total_label(one(KNOWN)).startswith("  peak ≈ ")
