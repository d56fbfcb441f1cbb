"""Estimate vs measurement for every benchmark script: `make bench-vram`.

For each script and variant (batch size, optimizer, bf16 autocast) it writes the variant to
bench/out/ by changing the script's BATCH / OPT / AUTOCAST constants, measures its CPU peak with
measure.py under the torch venv, estimates it with `--device cpu`, and prints both with the
error. Then the median and worst absolute error. `--peer` adds torch-preflight 0.5.0's estimate
(run as a black box from bench/.venv-peer) when that venv exists.

Usage: python bench/vram/compare.py [--torch bench/.venv-torch/bin/python] [--only NAME] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

SCRIPTS = ["mlp", "cnn_bn", "resnet", "unet", "gpt", "vit", "lstm_lm", "gru_seq2seq", "vae", "dcgan", "audio_conv1d", "recommender"]


def variants(text: str) -> list[tuple[str, dict[str, str]]]:
    batch = int(re.search(r"^BATCH = (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    return [
        (f"b{batch}-adam-fp32", {"BATCH": str(batch), "OPT": '"adam"', "AUTOCAST": "False"}),
        (f"b{2 * batch}-adam-fp32", {"BATCH": str(2 * batch), "OPT": '"adam"', "AUTOCAST": "False"}),
        (f"b{batch}-sgd-fp32", {"BATCH": str(batch), "OPT": '"sgd"', "AUTOCAST": "False"}),
        (f"b{batch}-adamw-bf16", {"BATCH": str(batch), "OPT": '"adamw"', "AUTOCAST": "True"}),
    ]


def large_variants(text: str) -> list[tuple[str, dict[str, str]]]:
    """Eight times the script's batch, fp32 Adam and bf16 AdamW: measured on a GPU only (cuda_truth.py --large)."""
    batch = 8 * int(re.search(r"^BATCH = (\d+)", text, re.M).group(1))  # type: ignore[union-attr]
    return [
        (f"b{batch}-adam-fp32", {"BATCH": str(batch), "OPT": '"adam"', "AUTOCAST": "False"}),
        (f"b{batch}-adamw-bf16", {"BATCH": str(batch), "OPT": '"adamw"', "AUTOCAST": "True"}),
    ]


def cuda_variant(text: str) -> str:
    """The script as run on a GPU: its CPU autocast becomes CUDA autocast (cuda_truth.py sets the default device)."""
    return text.replace('torch.autocast("cpu"', 'torch.autocast("cuda"')


def write_variant(name: str, tag: str, text: str, values: dict[str, str]) -> Path:
    for key, value in values.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}__{tag}.py"
    path.write_text(text, encoding="utf-8")
    return path


def measure(torch_python: str, path: Path) -> int | None:
    proc = subprocess.run([torch_python, str(HERE / "measure.py"), str(path)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return int(json.loads(line)["peak_bytes"])
    sys.stderr.write(proc.stderr[-2000:])
    return None


def estimate(path: Path) -> tuple[int | None, bool]:
    from torch_preflight.estimator import EstimateOptions, estimate_source

    reports = estimate_source(path.read_text(encoding="utf-8"), str(path), EstimateOptions(device="cpu"))
    if not reports:
        return None, False
    return reports[0].peak_bytes, reports[0].complete


def peer(path: Path) -> int | None:
    exe = ROOT / "bench" / ".venv-peer" / "bin" / "torch-preflight"
    if not exe.exists():
        return None
    proc = subprocess.run([str(exe), "estimate", str(path), "-f", "json"], capture_output=True, text=True, timeout=120)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None
    data = data[0] if isinstance(data, list) and data else data
    if not isinstance(data, dict) or data.get("resolved") is False:
        return None  # it could not read the model: no number to compare
    value = data.get("total_bytes", data.get("peak_bytes"))
    return int(value) if isinstance(value, (int, float)) and value else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", default=str(ROOT / "bench" / ".venv-torch" / "bin" / "python"))
    parser.add_argument("--only")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = parser.parse_args()
    cases: list[tuple[str, str, Path]] = []
    for name in SCRIPTS:
        if args.only and args.only != name:
            continue
        text = (HERE / f"{name}.py").read_text(encoding="utf-8")
        for tag, values in variants(text):
            cases.append((name, tag, write_variant(name, tag, text, values)))
    with ThreadPoolExecutor(args.jobs) as pool:
        measured = list(pool.map(lambda c: measure(args.torch, c[2]), cases))
    rows = []
    errors = []
    for (name, tag, path), truth in zip(cases, measured, strict=True):
        est, complete = estimate(path)
        err = None if truth in (None, 0) or est is None else (est - truth) / truth * 100
        theirs = peer(path)
        perr = None if truth in (None, 0) or theirs is None else (theirs - truth) / truth * 100
        if err is not None:
            errors.append(abs(err))
        rows.append((name, tag, truth, est, err, complete, theirs, perr))
    mib = lambda n: "-" if n is None else f"{n / 2**20:.2f}"  # noqa: E731
    pct = lambda e: "-" if e is None else f"{e:+.1f}%"  # noqa: E731
    if args.markdown:
        print("| script | variant | measured CPU (MiB) | estimate --device cpu (MiB) | error | torch-preflight 0.5.0 | its error |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for name, tag, truth, est, err, _complete, theirs, perr in rows:
            print(f"| {name} | {tag} | {mib(truth)} | {mib(est)} | {pct(err)} | {mib(theirs)} | {pct(perr)} |")
    else:
        print(f"{'script':14} {'variant':18} {'measured':>10} {'estimate':>10} {'error':>8}  {'peer':>10} {'peer err':>8}")
        for name, tag, truth, est, err, complete, theirs, perr in rows:
            flag = "" if complete else "  (incomplete)"
            print(f"{name:14} {tag:18} {mib(truth):>10} {mib(est):>10} {pct(err):>8}  {mib(theirs):>10} {pct(perr):>8}{flag}")
    if errors:
        print(f"\nmedian |error| {statistics.median(errors):.2f}%   worst |error| {max(errors):.2f}%   ({len(errors)} cases, MiB = 2^20 bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
