"""`torch-preflight measure`: the report (no torch needed), the CLI without torch, and tiny CPU runs under torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT
from torch_preflight.core.memory import LayerEstimate, MemoryReport

from torch_preflight.cli import main as cli_main
from torch_preflight.measure import command
from torch_preflight.measure.report import (
    LayerMeasure,
    Measurement,
    ModelMeasure,
    calibration,
    compare,
    downsample,
    plot,
    render_text,
    sparkline,
    to_json,
)

TORCH_REASON = "torch is not installed: the measured runs need the `measure` extra (pip install 'pytorch-preflight[measure]')"
NO_TORCH = """
import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch-preflight must not import {name}")
        return None

sys.meta_path.insert(0, _NoTorch())
"""

# -- canned data: no torch ----------------------------------------------------------------------


def canned() -> Measurement:
    return Measurement(
        script="train.py", device="cpu", torch_version="2.13.0", steps_requested=2, steps_completed=2,
        peak_bytes=4 * 2**20, peak_phase="optimizer", peak_where="AdamW", peak_step=1,
        breakdown={"parameters": 2**20, "gradients": 2**20, "optimizer_state": 2**20, "activations": 0, "temporaries": 2**20},
        models=[ModelMeasure("Net", [LayerMeasure("fc1", "Linear", 0), LayerMeasure("relu", "ReLU", 65536),
                                     LayerMeasure("extra", "Dropout", 1024)], forward_passes=2)],
        timeline=[0, 10, 20, 40, 30, 10], phases="ffbboo",
    )


def estimate() -> MemoryReport:
    layers = (LayerEstimate("fc1", "Linear", 3, 4, 100, 400, 0), LayerEstimate("relu", "ReLU", 4, 4, 0, 0, 131072),
              LayerEstimate("head", "Linear", 5, 4, 10, 40, 2048))
    return MemoryReport("Net", 9, 5 * 2**20, {"parameters": 2**20, "gradients": 2**20, "optimizer_state": 2 * 2**20,
                                               "activations": 0, "other": 2**20}, layers, (), (), True, device="cpu")


def test_sparkline_scales_to_the_maximum_and_keeps_phases_at_each_buckets_max() -> None:
    bars, marks = sparkline([0, 10, 20, 40, 30, 10], width=6, phases="ffbboo")
    assert bars == "▁▃▅█▆▃"
    assert marks == "ffbboo"
    bars, marks = sparkline([0, 10, 20, 40, 30, 10], width=3, phases="ffbboo")
    assert bars == "▃█▆"  # max of each pair: 10, 40, 30
    assert marks == "fbo"
    assert sparkline([], 10) == ("", "")
    assert sparkline([5, 5], width=10)[0] == "██"  # never wider than the data


def test_downsample_keeps_the_peak() -> None:
    values = [i % 97 for i in range(10_000)]
    values[7777] = 1_000_000
    phases = "f" * 7777 + "o" + "b" * (10_000 - 7778)
    out, marks = downsample(values, phases, limit=100)
    assert len(out) == 100 and len(marks) == 100
    assert max(out) == 1_000_000 and marks[out.index(1_000_000)] == "o"


def test_compare_joins_layers_by_name_and_totals() -> None:
    (c,) = compare(canned(), [estimate()])
    rows = {r.name: r for r in c.rows}
    assert [r.name for r in c.rows] == ["fc1", "relu", "head", "extra"]
    assert rows["relu"].error_bytes == 131072 - 65536 and rows["relu"].error_pct == pytest.approx(100.0)
    assert rows["head"].measured == 0 and rows["head"].error_pct is None  # nothing measured: no percentage
    assert rows["extra"].estimated == 0  # measured but not estimated
    assert c.total.measured == 65536 + 1024 and c.total.estimated == 131072 + 2048


def test_compare_without_an_estimate() -> None:
    (c,) = compare(canned(), [])
    assert c.estimate is None and c.total.estimated is None
    text = render_text(canned(), [c])
    assert "no estimate" in text and "(no static estimate for this model)" in text


def test_text_report_from_a_canned_measurement() -> None:
    m = canned()
    text = render_text(m, compare(m, [estimate()]), width=6)
    assert "Measured peak     4.0 MiB (4,194,304 bytes), during optimizer (AdamW) in step 1" in text
    assert "Estimated peak    5.0 MiB (5,242,880 bytes) for Net, error +1.0 MiB (+25.0%)" in text
    lines = text.splitlines()
    relu = next(line for line in lines if line.strip().startswith("relu"))
    assert relu.split() == ["relu", "ReLU", "64.0", "KiB", "128.0", "KiB", "+64.0", "KiB", "(+100.0%)"]
    total = next(line for line in lines if line.strip().startswith("total"))
    assert "+65.0 KiB" in total
    assert "optimizer state" in text and "temporaries / other" in text
    assert "  ▁▃▅█▆▃" in lines and "  ffbboo" in lines


def test_json_and_calibration_from_a_canned_measurement(tmp_path: Path) -> None:
    m = canned()
    comps = compare(m, [estimate()])
    data = json.loads(json.dumps(to_json(m, comps)))
    assert data["peak_bytes"] == 4 * 2**20 and data["peak_error_bytes"] == 2**20
    assert Measurement.from_json({k: v for k, v in data.items() if k in Measurement.__dataclass_fields__}) == m
    layers = {r["name"]: r for r in data["comparison"][0]["layers"]}
    assert layers["relu"]["error_pct"] == 100.0
    cal = calibration(m, comps)
    assert cal["kind"] == "torch-preflight-calibration"
    assert [d["name"] for d in cal["models"][0]["discrepancies"]] == ["relu", "head", "extra"]  # fc1 agrees: not listed
    assert cal["peak"] == {"measured_bytes": 4 * 2**20, "estimated_bytes": 5 * 2**20, "error_bytes": 2**20}


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_plot_writes_the_picture(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: --plot needs the `measure` extra")
    out = tmp_path / f"memory{suffix}"
    plot(canned(), str(out), estimate_peak=5 * 2**20)
    head = out.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in out.read_bytes()


def test_cli_without_torch_exits_2_with_the_extra(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_TORCH, encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must never run')\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env, timeout=60)
    assert probe.returncode != 0 and "must not import torch" in probe.stderr  # the hook is active
    result = subprocess.run([sys.executable, "-m", "torch_preflight", "measure", str(script)], cwd=tmp_path,
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "pip install 'pytorch-preflight[measure]'" in result.stderr and "not installed" in result.stderr
    assert "must not import" not in result.stderr and "must never run" not in result.stderr
    helped = subprocess.run([sys.executable, "-m", "torch_preflight", "measure", "--help"], cwd=tmp_path,
                            capture_output=True, text=True, env=env, timeout=60)
    assert helped.returncode == 0 and "RUNS YOUR SCRIPT" in helped.stdout and "pytorch-preflight[measure]" in helped.stdout
    est = subprocess.run([sys.executable, "-m", "torch_preflight", "estimate", str(ROOT / "examples/good/train_classifier.py")],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert est.returncode == 0 and "must not import" not in est.stderr and "Peak" in est.stdout


def test_cli_missing_torch_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(command, "torch_available", lambda: False)
    script = tmp_path / "train.py"
    script.write_text("x = 1\n", encoding="utf-8")
    assert cli_main(["measure", str(script)]) == 2
    assert "pytorch-preflight[measure]" in capsys.readouterr().err


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["measure", str(tmp_path / "missing.py")]) == 2
    assert "no such script" in capsys.readouterr().err
    script = tmp_path / "train.py"
    script.write_text("x = 1\n", encoding="utf-8")
    assert cli_main(["measure", str(script), "--plot", "out.pdf"]) == 2
    assert ".png or .svg" in capsys.readouterr().err
    assert cli_main(["measure", str(script), "--steps", "0"]) == 2


def test_the_main_cli_does_not_import_the_runtime() -> None:
    code = ("import sys; from torch_preflight.cli import main; main(['rules']); "
            "assert 'torch_preflight.measure.runtime' not in sys.modules and 'torch' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr


# -- under torch, on the CPU ----------------------------------------------------------------------

TINY = """
import sys
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
criterion = nn.MSELoss()
try:
    for step in range(10):
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        print("step", step)
except Exception:  # a broad handler in the user's script must not swallow the stop
    print("swallowed")
open(sys.argv[1], "w").write("ran to the end")
"""


@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch", reason=TORCH_REASON)


def test_measures_a_tiny_model_and_stops_after_the_steps(tmp_path: Path, torch_mod, capsys: pytest.CaptureFixture[str]) -> None:
    from torch_preflight.measure.runtime import measure_script

    script = tmp_path / "tiny.py"
    script.write_text(TINY, encoding="utf-8")
    marker = tmp_path / "end.txt"
    hooks_before = len(torch_mod.nn.modules.module._global_forward_hooks)
    m = measure_script(str(script), [str(marker)], steps=2, device="cpu")
    out = capsys.readouterr().out
    assert "step 0" in out and "step 1" not in out and "swallowed" not in out  # stopped inside the second step()
    assert not marker.exists()  # stopped: the rest of the script never ran
    assert len(torch_mod.nn.modules.module._global_forward_hooks) == hooks_before  # hooks removed
    assert m.steps_completed == 2 and m.error is None and m.device == "cpu"
    params = (16 * 32 + 32 + 32 * 4 + 4) * 4
    assert m.breakdown["parameters"] == params
    assert m.peak_bytes >= 3 * params  # parameters, gradients and momentum buffers are all live at some point
    assert sum(m.breakdown.values()) == m.peak_bytes
    (model,) = m.models
    assert model.model == "Sequential" and model.forward_passes == 2
    # GELU saves its input (8x32 fp32), the last Linear its input (GELU's output); the first Linear's input is the batch
    assert {lay.name: lay.activation_bytes for lay in model.layers} == {"1": 8 * 32 * 4, "2": 8 * 32 * 4}
    assert set(m.phases) >= {"f", "b", "o"} and len(m.phases) == len(m.timeline)
    assert max(m.timeline) <= m.peak_bytes


def test_script_errors_are_reported(tmp_path: Path, torch_mod, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import torch\nraise ValueError('boom')\n", encoding="utf-8")
    assert cli_main(["measure", str(script), "--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert "ValueError: boom" in captured.out and "0 of 2 optimizer steps" in captured.out


def test_measure_cli_on_the_bundled_example(tmp_path: Path, torch_mod, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: --plot needs the `measure` extra")
    example = ROOT / "examples" / "good" / "train_classifier.py"
    svg, cal = tmp_path / "memory.svg", tmp_path / "cal.json"
    rc = cli_main(["measure", str(example), "--device", "cpu", "--format", "json", "--plot", str(svg), "--calibrate", str(cal)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)  # the script's own prints went to stderr
    assert data["steps_completed"] == 2 and data["estimate"]["model"] == "Net"
    rows = {r["name"]: r for r in data["comparison"][0]["layers"]}
    assert set(rows) == {"(model)", "fc1", "dropout", "fc2"}
    # Net.forward: relu's output (64x256 fp32) in the model, dropout's noise, fc2's input; fc1's input is the batch
    assert {n: r["measured_bytes"] for n, r in rows.items()} == {"(model)": 65536, "fc1": 0, "dropout": 65536, "fc2": 65536}
    assert data["breakdown"]["parameters"] == (784 * 256 + 256 + 256 * 10 + 10) * 4
    assert b"<svg" in svg.read_bytes()
    calib = json.loads(cal.read_text(encoding="utf-8"))
    assert calib["models"][0]["model"] == "Net" and calib["peak"]["measured_bytes"] == data["peak_bytes"]


def test_bench_ground_truth_uses_the_same_runtime(tmp_path: Path, torch_mod) -> None:
    from torch_preflight.measure.runtime import cpu_peak

    script = tmp_path / "alloc.py"
    script.write_text(textwrap.dedent("""
        import torch
        a = torch.zeros(1024, 1024)
        b = torch.zeros(256, 1024)
        del a
        c = torch.zeros(512, 1024)
    """), encoding="utf-8")
    assert cpu_peak(str(script)) == (1024 + 256) * 1024 * 4
