"""`torch-preflight estimate FILE`: the static VRAM estimate of a training script, as text or JSON."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch_preflight.core.config import ConfigError, load_config, parse_size
from torch_preflight.core.memory import MemoryReport, format_bytes
from torch_preflight.core.notebook import NotebookError, is_notebook_path, join, parse_notebook
from torch_preflight.core.source import Position
from torch_preflight.estimator import GPUS, EstimateOptions, estimate_source, gpu_memory
from torch_preflight.estimator.configs import parse_supplied

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "rmsprop", "adagrad", "adam8bit", "none")


EXIT_OK, EXIT_OVER_BUDGET, EXIT_ERROR, EXIT_INCOMPLETE = 0, 1, 2, 3
EPILOG = """\
the script's own arguments: everything after `--` (torch-preflight estimate train.py -- --batch-size 64) is the
command line its argparse parser or configurator reads; without it, every option has its default.

values the script computes from its data at run time (a vocabulary built from a corpus, a length read from a
file) cannot be known statically: the estimate lists them as unknown, and --set NAME=VALUE (repeatable) supplies
one. Every assignment to NAME (a variable, an attribute obj.NAME, or a dotted target such as self.train) then binds
VALUE instead of its right side. VALUE is a Python literal (33278, 0.1, (3, 224, 224)), a tensor written as torch
would build it (torch.empty(2088628, dtype=torch.long)), or else a string. In pyproject.toml:
  [tool.torch-preflight]
  set = {ntokens = 33278, "self.train" = "torch.empty(2088628, dtype=torch.long)"}

exit status:
  0  every model's estimate is complete (and fits the budget, when one is given)
  1  a model does not fit the budget (its estimate, or the lower bound of an incomplete one, is over it)
  2  usage error, or the file cannot be read
  3  an estimate is incomplete: part of the model or step could not be read, so its peak is only a
     lower bound ("at least X") and the unknown parts are listed; or no nn.Module model was found

JSON: lines and columns are 1-based; "complete" is true only when "unknowns" is empty, and
"peak_is_lower_bound" is its negation."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("file", metavar="FILE", help="the training script (or model file) to estimate")
    parser.add_argument("--model", help="the model class (or variable) to report; default: every trained model")
    parser.add_argument("--batch-size", type=int, help="override the batch size read from the script")
    parser.add_argument("--input-shape", help="one sample's shape without the batch dimension, e.g. 3,224,224")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="parameter dtype")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, help="override the optimizer read from the script")
    parser.add_argument("--gpu", help=f"budget from a GPU name: {', '.join(sorted(GPUS))}")
    parser.add_argument("--gpu-memory", help="budget as a size, e.g. 24GiB")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="backend semantics to model (default cuda)")
    parser.add_argument("--gpus", type=int, metavar="N", help="the GPUs the job runs on: what DeepSpeed's ZeRO shards across")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="values",
                        help="a value the script computes at run time, e.g. --set ntokens=33278 (repeatable; see below)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--python", metavar="PATH", help="the environment whose installed libraries (torchvision, timm) "
                        "models are read from, as source: an interpreter or a virtual environment (default: this one)")


def options_from_args(args: argparse.Namespace) -> EstimateOptions:
    """Flags first, then `[tool.torch-preflight]` (gpu-memory, gpu, dtype, batch-size)."""
    config = load_config(Path(args.file))
    budget = None
    gpu = args.gpu or (config.gpu if not args.gpu_memory else None)
    if args.gpu_memory:
        budget = parse_size(args.gpu_memory)
    elif gpu:
        budget = gpu_memory(gpu)
        if budget is None:
            raise ConfigError(f"unknown GPU {gpu!r}; known: {', '.join(sorted(GPUS))}")
    elif config.gpu_memory:
        budget = config.gpu_memory
    shape = None
    if args.input_shape:
        try:
            shape = tuple(int(v) for v in args.input_shape.replace("x", ",").strip("()[] ").split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"cannot read --input-shape {args.input_shape!r} (try 3,224,224)") from None
    dtype = args.dtype or config.dtype
    values = dict(config.values)
    for text in getattr(args, "values", None) or []:
        try:
            name, value = parse_supplied(text)
        except ValueError as exc:
            raise ConfigError(f"--set {exc}") from None
        values[name] = value
    return EstimateOptions(
        model=args.model, batch_size=args.batch_size or config.batch_size, input_shape=shape,
        dtype=DTYPES.get(dtype, dtype) if dtype else None, optimizer=args.optimizer, device=args.device,
        budget_bytes=budget, gpu=gpu, argv=tuple(args.script_args) if getattr(args, "script_args", None) else None,
        python=getattr(args, "python", None),
        values=tuple(values.items()), world_size=getattr(args, "gpus", None),
    )


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"torch-preflight estimate: cannot read {path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    where: Callable[[int], str] = lambda line: str(line + 1)  # noqa: E731
    if is_notebook_path(str(path)):
        notebook = parse_notebook(text)
        if isinstance(notebook, NotebookError):
            print(f"torch-preflight estimate: cannot read {path}: {notebook.message}", file=sys.stderr)
            return EXIT_ERROR
        joined = join(notebook)
        text = joined.text

        def where(line: int) -> str:
            cell = joined.to_cell(Position(line, 0))
            return f"cell {cell.cell}:{cell.line + 1}"
    try:
        options = options_from_args(args)
    except ConfigError as exc:
        print(f"torch-preflight estimate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    reports = estimate_source(text, str(path), options)
    if args.format == "json":
        print(json.dumps(to_json(reports, str(path), where), indent=2))
    else:
        render_text(reports, str(path), where)
    return exit_status(reports)


def exit_status(reports: list[MemoryReport]) -> int:
    """EXIT_OVER_BUDGET when a model is over the budget (even as a lower bound), else EXIT_INCOMPLETE when an
    estimate is incomplete or none was made, else EXIT_OK (the epilog documents them)."""
    if any(r.fits is False for r in reports):
        return EXIT_OVER_BUDGET
    if not reports or not all(r.complete for r in reports):
        return EXIT_INCOMPLETE
    return EXIT_OK


def _located(text: str, path: str, where: Callable[[int], str]) -> str:
    """Rewrite `file:LINE` references (module lines) with `where` (cells, for notebooks)."""
    name = re.escape(Path(path).name)
    return re.sub(rf"({name}):(\d+)", lambda m: f"{m.group(1)}:{where(int(m.group(2)) - 1)}", text)


def to_json(reports: list[MemoryReport], path: str, where: Callable[[int], str] | None = None) -> dict[str, Any]:
    """`where` given (notebooks): every layer and the model also carry `location`, e.g. "cell 3:2"."""
    models = [r.to_json() for r in reports]
    if where is not None and is_notebook_path(path):
        for report, data in zip(reports, models, strict=True):
            data["location"] = where(report.model_line)
            for layer, layer_data in zip(report.layers, data.get("layers", []), strict=False):
                layer_data["location"] = where(layer.line)
            for assumption in data.get("assumptions", []):
                assumption["text"] = _located(assumption["text"], path, where)
    return {"file": path, "models": models}


PHASES = {"forward": "during forward", "backward": "during backward", "step": "during the optimizer step",
          "setup": "while the script sets up, before its training steps",
          "evaluation": "in a forward under torch.no_grad() between training steps"}


def peak_line(r: MemoryReport) -> str:
    """'Peak 1.3 GiB (...)' for a complete estimate; 'Peak at least 1.3 GiB; 2 layers and 3 other parts unknown' else."""
    what = "what max_memory_allocated() reports" if r.device == "cuda" else "live CPU bytes, as the profiler's memory events count them"
    if r.complete:
        return f"[bold]Peak[/bold] {format_bytes(r.peak_bytes)} ({r.peak_bytes:,} bytes, {what})"
    layers = len(r.unknown_layers)
    other = max(len(r.unknowns) - layers, 0)
    parts = []
    if layers:
        parts.append(f"{layers} layer{'s' if layers != 1 else ''}")
    if other:
        parts.append(f"{other} {'other ' if layers else ''}part{'s' if other != 1 else ''}")
    unknown = " and ".join(parts) + " unknown" if parts else "part of it unknown"
    if not r.layers and r.peak_bytes == 0:
        return f"[bold]Peak[/bold] not estimated; {unknown}"
    return f"[bold]Peak[/bold] at least {format_bytes(r.peak_bytes)} ({r.peak_bytes:,} bytes); {unknown}"


def render_breakdown(console: Any, r: MemoryReport) -> None:
    console.print(f"[bold]Breakdown at the peak[/bold] ({PHASES.get(r.phase, r.phase)})")
    for key, value in r.breakdown.items():
        note = ""
        if key == "activations" and r.saved_activation_bytes and value < r.saved_activation_bytes:
            # the peak after backward has freed what forward saved: say so, the table lists them
            note = f"  (forward saves {format_bytes(r.saved_activation_bytes)}; backward has freed " + (
                "them all" if value == 0 else f"{format_bytes(r.saved_activation_bytes - value)}") + " by the peak)"
        console.print(f"  {key.replace('_', ' '):16} {format_bytes(value):>12}{note}")


def render_text(reports: list[MemoryReport], path: str, where: Callable[[int], str] = lambda line: str(line + 1)) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # A table this wide wraps badly at the 80 columns rich assumes for pipes and files.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    if not reports:
        console.print(f"{path}: no nn.Module model found to estimate")
        return
    for r in reports:
        title = f"{r.model} ({path}:{where(r.model_line)}), --device {r.device}"
        table = Table(title=title, title_justify="left")
        table.add_column("layer")
        table.add_column("type")
        table.add_column("line", justify="right")
        table.add_column("params", justify="right")
        table.add_column("param mem", justify="right")
        table.add_column("saved activations", justify="right")
        table.add_column("output")
        table.add_column("", no_wrap=True)
        top = max([lay.param_bytes + (lay.activation_bytes or 0) for lay in r.layers] or [1]) or 1
        for lay in r.layers:
            size = lay.param_bytes + (lay.activation_bytes or 0)
            bar = "█" * round(12 * size / top)
            shape = "x".join(str(d) for d in lay.output_shape) if lay.output_shape else ""
            line = f"{Path(lay.file).name}:{lay.line + 1}" if lay.file else where(lay.line)  # built in the user's other module
            name = f"({r.model} itself)" if lay.name == "(model)" else lay.name
            if lay.unknown:
                table.add_row(name, lay.type, line, "?", "?", "?", "", "unknown")
                continue
            table.add_row(name, lay.type, line, f"{lay.params:,}", format_bytes(lay.param_bytes),
                          format_bytes(lay.activation_bytes), shape, bar)
        if r.layers:
            console.print(table)
            if any(lay.name == "(model)" for lay in r.layers):
                console.print(f"  ({r.model} itself): the parameters {r.model} holds directly, and what the ops written in "
                              f"its own forward() save")
            render_breakdown(console, r)
        console.print(peak_line(r))
        if r.device == "cuda" and r.complete:
            console.print(f"  nvidia-smi would show about {format_bytes(r.peak_bytes + r.overhead_bytes)}: "
                          f"+{format_bytes(r.overhead_bytes)} CUDA context and allocator reserve (not in the peak)")
        if r.unknowns:
            console.print("[bold yellow]Unknown[/bold yellow] (the peak above is a lower bound until these are known)")
            for a in r.unknowns:
                console.print(f"  - {escape(_located(a.text, path, where))}")
        if r.assumptions:
            console.print("[bold]Assumptions[/bold]")
        for a in r.assumptions:
            console.print(f"  - {escape(_located(a.text, path, where))}")
        if r.budget_bytes is not None:
            verdict = ("[green]fits[/green]" if r.fits else "[red]does not fit[/red]" if r.fits is False
                       else "[yellow]not known[/yellow] (the lower bound fits)")
            console.print(f"[bold]Budget[/bold] {format_bytes(r.budget_bytes)}: {verdict}"
                          + (f"; largest batch size that fits: {r.max_batch_size}" if r.max_batch_size is not None else ""))
            for s in r.suggestions:
                mark = "fits" if s.peak_bytes <= r.budget_bytes else "still over"
                console.print(f"  - {s.remedy}: peak {format_bytes(s.peak_bytes)} ({mark}){' - ' + s.note if s.note else ''}")
        console.print()
