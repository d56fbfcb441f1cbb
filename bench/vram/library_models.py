"""Library models read from their source vs the bundled catalog vs the CPU truth.

For torchvision's resnet18, resnet50 and vit_b_16 (one SGD training script each, batch 2 at 224x224), it prints
- the estimate with the library read from its published source (`--python` naming an environment whose
  site-packages holds torchvision 0.29.1's sources, bench/out/corpus/packages),
- the estimate from the catalog (an environment without torchvision),
- the CPU peak of two steps measured with the torch venv (`--torch`), torchvision imported from those sources (its
  compiled extension is absent: a sitecustomize stands in for the one module that needs it).

Measurements are cached in bench/out/library-models/measured.json (`--remeasure` refreshes them).

Usage: python bench/vram/library_models.py [--torch .venv/bin/python] [--only resnet18] [--remeasure]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "bench" / "out" / "library-models"
PACKAGES = ROOT / "bench" / "out" / "corpus" / "packages"
CACHE = OUT / "measured.json"
sys.path.insert(0, str(ROOT))

MODELS = ("resnet18", "resnet50", "vit_b_16")
SCRIPT = """\
import torch
import torch.nn as nn
from torchvision import models

model = models.{factory}(weights=None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    nn.functional.cross_entropy(model(torch.randn(2, 3, 224, 224)), torch.randint(0, 1000, (2,))).backward()
    opt.step()
"""


def environments() -> tuple[Path, Path, Path]:
    """(environment with torchvision's sources, environment without it, the measuring process's extra path)."""
    site = OUT / "env" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True, exist_ok=True)
    link = site / "torchvision"
    if link.is_symlink() and link.resolve() != (PACKAGES / "torchvision").resolve():
        link.unlink()  # left by a checkout elsewhere
    if not link.exists():
        link.symlink_to(PACKAGES / "torchvision")
    empty = OUT / "empty"
    empty.mkdir(exist_ok=True)
    stub = OUT / "measure-site"
    stub.mkdir(exist_ok=True)
    (stub / "sitecustomize.py").write_text(
        "import sys, types\nsys.modules['torchvision._meta_registrations'] = types.ModuleType('torchvision._meta_registrations')\n")
    return OUT / "env", empty, stub


def estimate(path: Path, python: Path) -> tuple[int | None, bool, str]:
    from torch_preflight.estimator import EstimateOptions, estimate_source

    reports = estimate_source(path.read_text(encoding="utf-8"), str(path), EstimateOptions(device="cpu", python=str(python)))
    if not reports:
        return None, False, "no model"
    source = "source" if any("installed library's source" in a.text for a in reports[0].assumptions) else "catalog"
    return reports[0].peak_bytes, reports[0].complete, source


def measure(torch_python: str, path: Path, stub: Path, site: Path) -> int | None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{stub}{os.pathsep}{site}"}
    proc = subprocess.run([torch_python, str(HERE / "measure.py"), str(path)], capture_output=True, text=True, timeout=1800, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return int(json.loads(line)["peak_bytes"])
    sys.stderr.write(proc.stderr[-2000:])
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch", default=str(ROOT / ".venv" / "bin" / "python"))
    parser.add_argument("--only")
    parser.add_argument("--remeasure", action="store_true", help="measure again (measurements are cached)")
    args = parser.parse_args()
    if not (PACKAGES / "torchvision" / "models" / "resnet.py").is_file():
        print(f"torchvision's sources are not in {PACKAGES}", file=sys.stderr)
        return 1
    with_lib, without, stub = environments()
    measured: dict[str, int | None] = json.loads(CACHE.read_text(encoding="utf-8")) if CACHE.is_file() else {}

    def pct(value: int | None, truth: int | None) -> str:
        return f"{100 * (value - truth) / truth:+.2f}%" if value and truth else "n/a"

    print("| model | source-read estimate | catalog estimate | CPU peak (measured) | source vs truth | catalog vs truth |")
    print("|---|---:|---:|---:|---:|---:|")
    for factory in MODELS:
        if args.only and factory != args.only:
            continue
        path = OUT / f"{factory}.py"
        path.write_text(SCRIPT.format(factory=factory), encoding="utf-8")
        src, src_complete, src_kind = estimate(path, with_lib)
        cat, cat_complete, cat_kind = estimate(path, without)
        if factory not in measured or args.remeasure:
            measured[factory] = measure(args.torch, path, stub, next(with_lib.glob("lib/python3*/site-packages")))
            CACHE.write_text(json.dumps(measured, indent=1), encoding="utf-8")
        truth = measured[factory]
        if (src_kind, cat_kind) != ("source", "catalog") or not (src_complete and cat_complete):
            print(f"{factory}: read from {src_kind} (complete {src_complete}) and {cat_kind} (complete {cat_complete})", file=sys.stderr)
        print(f"| {factory} | {src:,} | {cat:,} | {truth:,} | {pct(src, truth)} | {pct(cat, truth)} |" if src and cat and truth
              else f"| {factory} | {src} | {cat} | {truth} | n/a | n/a |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
