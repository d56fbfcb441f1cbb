"""`torch-preflight measure SCRIPT`: RUN a training script for a few optimizer steps and measure its memory.

Torch-free itself: it checks that torch is installed, then imports `torch_preflight.measure.runtime`
(the one module that imports torch) only to run the script.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import Any

EXTRA = "pip install 'pytorch-preflight[measure]'"
HELP = ("RUN a training script for a few optimizer steps and compare its measured memory with the static estimate "
        "(executes your code; needs torch: `pip install pytorch-preflight[measure]`)")
DESCRIPTION = f"""\
WARNING: unlike every other torch-preflight command, `measure` RUNS YOUR SCRIPT (as __main__, in this
process) until --steps optimizer steps have completed, then stops it. Only run code you trust.

It records every allocation and free (torch.profiler memory events on the CPU; the CUDA caching
allocator's statistics, and optionally its memory history, on a GPU), attributes live bytes to
modules and to categories (parameters, gradients, optimizer state, activations, temporaries), and
prints the measured peak and per-layer saved activations next to `torch-preflight estimate`'s
numbers, with the error per layer and in total, plus a sparkline of the step's memory timeline.

Needs the `measure` extra (torch and matplotlib): {EXTRA}
Exit codes: 0 measured; 1 the script failed or completed no optimizer step; 2 usage error or torch missing."""


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("script", metavar="SCRIPT", help="the training script to RUN (as __main__)")
    parser.add_argument("--script-args", default="", metavar="ARGS", help="the script's own command line, one string "
                        "(split like a shell): --script-args='--epochs 1 --lr 0.1'")
    parser.add_argument("--steps", type=_positive, default=2, help="stop after this many optimizer steps (default 2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="what to measure: CPU allocations (profiler) or the CUDA "
                        "caching allocator (default: cuda when available)")
    parser.add_argument("--plot", metavar="FILE", help="write the memory timeline as a picture: .png or .svg (matplotlib)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="report format (json: the script's own "
                        "stdout goes to stderr)")
    parser.add_argument("--calibrate", metavar="FILE", help="write the per-layer discrepancies to this JSON file "
                        "(for estimator maintainers; never changes the estimator)")
    parser.add_argument("--memory-history", metavar="FILE", help="CUDA only: dump torch.cuda.memory's snapshot (pickle) "
                        "for https://pytorch.org/memory_viz")
    parser.add_argument("--width", type=_positive, default=64, help="sparkline width in characters (default 64)")


def torch_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def missing_torch_message() -> str:
    return (f"torch-preflight measure: error: `measure` runs your script under torch, which is not installed here.\n"
            f"  Install the extra: {EXTRA}  (torch and matplotlib; every other command works without them)")


def run(args: argparse.Namespace) -> int:
    script = Path(args.script)
    if not script.is_file():
        print(f"torch-preflight measure: error: no such script: {script}", file=sys.stderr)
        return 2
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".svg"):
        print(f"torch-preflight measure: error: --plot must end in .png or .svg, got {args.plot!r}", file=sys.stderr)
        return 2
    if args.memory_history and args.device == "cpu":
        print("torch-preflight measure: error: --memory-history needs --device cuda", file=sys.stderr)
        return 2
    if not torch_available():
        print(missing_torch_message(), file=sys.stderr)
        return 2
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print(f"torch-preflight measure: error: --plot needs matplotlib; install the extra: {EXTRA}", file=sys.stderr)
        return 2
    from torch_preflight.measure import runtime

    try:
        script_args = shlex.split(args.script_args)
    except ValueError as exc:
        print(f"torch-preflight measure: error: cannot split --script-args: {exc}", file=sys.stderr)
        return 2
    try:
        measurement = runtime.measure_script(str(script), script_args, steps=args.steps, device=args.device,
                                             quiet=args.format == "json", memory_history=args.memory_history)
    except RuntimeError as exc:
        print(f"torch-preflight measure: error: {exc}", file=sys.stderr)
        return 2
    return report(measurement, args)


def estimates_for(path: str, device: str) -> list[Any]:
    from torch_preflight.estimator import EstimateOptions, estimate_source

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return estimate_source(text, path, EstimateOptions(device=device))


def report(measurement: Any, args: argparse.Namespace) -> int:
    """Compare with the estimate of the same file, then print / plot / write the calibration file."""
    from torch_preflight.measure.report import calibration, compare, plot, render_text, to_json

    comparisons = compare(measurement, estimates_for(measurement.script, measurement.device))
    main = next((c.estimate for c in comparisons if c.estimate is not None), None)
    if args.plot:
        plot(measurement, args.plot, main.peak_bytes if main is not None else None)
    if args.calibrate:
        Path(args.calibrate).write_text(json.dumps(calibration(measurement, comparisons), indent=2) + "\n", encoding="utf-8")
    if args.format == "json":
        print(json.dumps(to_json(measurement, comparisons), indent=2))
    else:
        sys.stdout.write(render_text(measurement, comparisons, width=args.width))
        if args.plot:
            print(f"wrote the timeline to {args.plot}")
        if args.calibrate:
            print(f"wrote the per-layer discrepancies to {args.calibrate}")
    return 1 if measurement.error or measurement.steps_completed == 0 else 0


__all__ = ["add_arguments", "missing_torch_message", "report", "run", "torch_available"]
