"""What `measure` found, compared with the static estimate: data types and reports (no torch here).

A `Measurement` is produced by `torch_preflight.measure.runtime` (which imports torch) or built by
hand in tests. `compare()` lines it up with the estimator's `MemoryReport`s of the same file;
`render_text`, `to_json`, `calibration`, `sparkline` and `plot` present it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch_preflight.core.memory import MemoryReport

# runtime.py (and so this module) also runs from a source checkout without the package-dir mapping
# (bench/vram/measure.py under the torch venv), where torch_preflight.core is not importable: core is
# only needed to present a report, so it is imported there.


def format_bytes(n: int | float | None) -> str:
    from torch_preflight.core.memory import format_bytes as fmt

    return fmt(n)

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries")
PHASES = {"forward": "f", "backward": "b", "optimizer": "o", "other": "·", "setup": "·"}
BARS = "▁▂▃▄▅▆▇█"


@dataclass
class LayerMeasure:
    name: str  # dotted path inside the model, "(model)" for the model's own forward
    type: str
    activation_bytes: int  # bytes autograd saved while this was the innermost module, one forward pass


@dataclass
class ModelMeasure:
    model: str  # class name
    layers: list[LayerMeasure]
    forward_passes: int = 0


@dataclass
class Measurement:
    script: str
    device: str
    torch_version: str
    steps_requested: int
    steps_completed: int
    peak_bytes: int
    peak_phase: str  # forward | backward | optimizer | other | setup
    peak_where: str  # the module (or "(loss)", "(optimizer)") active at the peak
    peak_step: int  # 1-based step during which the peak happened (0: before the first step)
    breakdown: dict[str, int]  # CATEGORIES, at the peak
    models: list[ModelMeasure]
    timeline: list[int]  # live bytes, sampled (max-preserving) over the measured steps
    phases: str  # one letter per timeline sample: f b o ·
    error: str | None = None  # the script's exception (other than the stop we raise), if any
    memory_history: str | None = None  # the CUDA memory snapshot written with --memory-history
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Measurement:
        models = [ModelMeasure(m["model"], [LayerMeasure(**lay) for lay in m["layers"]], m.get("forward_passes", 0)) for m in data["models"]]
        return cls(**{**data, "models": models})


@dataclass
class LayerRow:
    name: str
    type: str
    measured: int | None
    estimated: int | None

    @property
    def error_bytes(self) -> int | None:
        return None if self.measured is None or self.estimated is None else self.estimated - self.measured

    @property
    def error_pct(self) -> float | None:
        err = self.error_bytes
        return None if err is None or not self.measured else err / self.measured * 100


@dataclass
class ModelComparison:
    model: str
    estimate: MemoryReport | None
    rows: list[LayerRow]

    @property
    def total(self) -> LayerRow:
        measured = sum(r.measured or 0 for r in self.rows)
        known = [r.estimated for r in self.rows if r.estimated is not None]
        return LayerRow("total", "", measured, sum(known) if known else None)


def compare(measurement: Measurement, estimates: list[MemoryReport]) -> list[ModelComparison]:
    """Pair each measured model with the estimate of the same class (in file order for repeats), layer by name."""
    pool = list(estimates)
    out: list[ModelComparison] = []
    for mm in measurement.models:
        est = next((r for r in pool if r.model == mm.model), None)
        if est is not None:
            pool.remove(est)
        measured = {lay.name: lay for lay in mm.layers}
        rows: list[LayerRow] = []
        if est is not None:
            for lay in est.layers:
                got = measured.pop(lay.name, None)
                rows.append(LayerRow(lay.name, lay.type, got.activation_bytes if got else 0, lay.activation_bytes))
        for lay in measured.values():
            if lay.activation_bytes:
                rows.append(LayerRow(lay.name, lay.type, lay.activation_bytes, None if est is None else 0))
        out.append(ModelComparison(mm.model, est, rows))
    return out


def _pct(err: int | None, base: int | None) -> str:
    if err is None:
        return "-"
    if not base:
        return f"{_signed(err)}" if err else "0 B"
    return f"{_signed(err)} ({err / base * 100:+.1f}%)"


def _signed(n: int) -> str:
    return ("+" if n >= 0 else "-") + format_bytes(abs(n))


def sparkline(values: list[int], width: int = 64, phases: str = "") -> tuple[str, str]:
    """Max-per-bucket sparkline of `values` and the matching phase letters (the phase at each bucket's max)."""
    if not values:
        return "", ""
    width = max(1, min(width, len(values)))
    top = max(values) or 1
    low = min(0, *values)
    bars, marks = [], []
    for i in range(width):
        a, b = i * len(values) // width, max((i + 1) * len(values) // width, i * len(values) // width + 1)
        j = max(range(a, b), key=values.__getitem__)
        level = (values[j] - low) / ((top - low) or 1)
        bars.append(BARS[min(len(BARS) - 1, max(0, round(level * (len(BARS) - 1))))])
        marks.append(phases[j] if j < len(phases) else " ")
    return "".join(bars), "".join(marks)


def downsample(values: list[int], phases: str, limit: int = 2000) -> tuple[list[int], str]:
    """Keep at most `limit` samples, each the maximum of its bucket (so the peak survives)."""
    if len(values) <= limit:
        return values, phases
    out, marks = [], []
    for i in range(limit):
        a, b = i * len(values) // limit, max((i + 1) * len(values) // limit, i * len(values) // limit + 1)
        j = max(range(a, b), key=values.__getitem__)
        out.append(values[j])
        marks.append(phases[j])
    return out, "".join(marks)


def _table(header: list[str], rows: list[list[str]], left: int = 2) -> list[str]:
    """Plain aligned columns: the first `left` left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = []
    for k, r in enumerate([header, *rows]):
        cells = [c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  " + "  ".join(cells).rstrip())
        if k == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return lines


def render_text(m: Measurement, comparisons: list[ModelComparison], width: int = 64) -> str:
    lines: list[str] = []
    stop = (f"stopped after optimizer step {m.steps_completed}" if m.steps_completed >= m.steps_requested
            else f"the script ended after {m.steps_completed} of {m.steps_requested} optimizer steps")
    lines.append(f"{m.script}: measured on {m.device} (torch {m.torch_version}), {stop}")
    if m.error:
        lines.append(f"  the script raised: {m.error}")
    where = f"{m.peak_phase} ({m.peak_where})" if m.peak_where else m.peak_phase
    lines.append(f"Measured peak  {format_bytes(m.peak_bytes):>10} ({m.peak_bytes:,} bytes), during {where}"
                 + (f" in step {m.peak_step}" if m.peak_step else ""))
    main = next((c.estimate for c in comparisons if c.estimate is not None), None)
    if main is not None:
        err = main.peak_bytes - m.peak_bytes
        lines.append(f"Estimated peak {format_bytes(main.peak_bytes):>10} ({main.peak_bytes:,} bytes) for {main.model}, "
                     f"error {_pct(err, m.peak_bytes)}")
    else:
        lines.append("Estimated peak: no estimate (the estimator found no model in this file)")
    lines.append("")
    lines.append("At the peak")
    rows = []
    for key in CATEGORIES:
        est_key = "other" if key == "temporaries" else key
        est = main.breakdown.get(est_key) if main is not None else None
        label = key.replace("_", " ") + (" / other" if key == "temporaries" else "")
        rows.append([label, format_bytes(m.breakdown.get(key, 0)), format_bytes(est) if main is not None else "-"])
    lines.extend(_table(["category", "measured", "estimated"], rows, left=1))
    for c in comparisons:
        lines.append("")
        lines.append(f"{c.model}: saved activations per layer, one forward pass"
                     + ("" if c.estimate is not None else " (no static estimate for this model)"))
        body = []
        for r in c.rows:
            body.append([r.name, r.type, format_bytes(r.measured), format_bytes(r.estimated) if r.estimated is not None else "-",
                         _pct(r.error_bytes, r.measured)])
        t = c.total
        body.append([t.name, "", format_bytes(t.measured), format_bytes(t.estimated) if t.estimated is not None else "-",
                     _pct(t.error_bytes, t.measured)])
        lines.extend(_table(["layer", "type", "measured", "estimated", "error"], body))
    bars, marks = sparkline(m.timeline, width, m.phases)
    if bars:
        lines.append("")
        lines.append(f"Timeline of {m.steps_completed} step(s) (f forward, b backward, o optimizer), "
                     f"{format_bytes(min(m.timeline))} .. {format_bytes(max(m.timeline))}")
        lines.append(f"  {bars}")
        lines.append(f"  {marks}")
    for note in m.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def to_json(m: Measurement, comparisons: list[ModelComparison]) -> dict[str, Any]:
    data = m.to_json()
    main = next((c.estimate for c in comparisons if c.estimate is not None), None)
    data["estimate"] = None if main is None else {"model": main.model, "peak_bytes": main.peak_bytes, "breakdown": main.breakdown,
                                                  "complete": main.complete}
    data["peak_error_bytes"] = None if main is None else main.peak_bytes - m.peak_bytes
    data["comparison"] = [_comparison_json(c) for c in comparisons]
    return data


def _row_json(r: LayerRow) -> dict[str, Any]:
    return {"name": r.name, "type": r.type, "measured_bytes": r.measured, "estimated_bytes": r.estimated,
            "error_bytes": r.error_bytes, "error_pct": None if r.error_pct is None else round(r.error_pct, 2)}


def _comparison_json(c: ModelComparison) -> dict[str, Any]:
    return {"model": c.model, "model_line": None if c.estimate is None else c.estimate.model_line + 1,
            "layers": [_row_json(r) for r in c.rows], "total": _row_json(c.total)}


def calibration(m: Measurement, comparisons: list[ModelComparison]) -> dict[str, Any]:
    """The per-layer discrepancies, for maintainers to turn into estimator fixes (nothing reads it back)."""
    main = next((c.estimate for c in comparisons if c.estimate is not None), None)
    return {
        "kind": "torch-preflight-calibration",
        "version": 1,
        "script": m.script,
        "device": m.device,
        "torch": m.torch_version,
        "steps": m.steps_completed,
        "peak": {"measured_bytes": m.peak_bytes, "estimated_bytes": None if main is None else main.peak_bytes,
                 "error_bytes": None if main is None else main.peak_bytes - m.peak_bytes},
        "breakdown": {"measured": m.breakdown, "estimated": None if main is None else main.breakdown},
        "models": [
            {**_comparison_json(c),
             "discrepancies": [_row_json(r) for r in c.rows if r.error_bytes]}
            for c in comparisons
        ],
    }


def plot(m: Measurement, path: str, estimate_peak: int | None = None) -> None:
    """The memory timeline as a picture (PNG or SVG by the extension), phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"f": "#4c9be8", "b": "#e8844c", "o": "#59b36b"}
    names = {"f": "forward", "b": "backward", "o": "optimizer"}
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=120)
    mib = [v / 2**20 for v in m.timeline]
    xs = list(range(len(mib)))
    ax.plot(xs, mib, color="#222222", linewidth=1.2, label="live bytes (measured)")
    start, seen = 0, set()
    for i in range(1, len(m.phases) + 1):
        if i == len(m.phases) or m.phases[i] != m.phases[start]:
            ph = m.phases[start]
            if ph in colors:
                ax.axvspan(start - 0.5, i - 0.5, color=colors[ph], alpha=0.18, linewidth=0,
                           label=names[ph] if ph not in seen else None)
                seen.add(ph)
            start = i
    ax.axhline(m.peak_bytes / 2**20, color="#c0392b", linestyle="--", linewidth=1, label=f"measured peak {format_bytes(m.peak_bytes)}")
    if estimate_peak is not None:
        ax.axhline(estimate_peak / 2**20, color="#8e44ad", linestyle=":", linewidth=1.4, label=f"estimated peak {format_bytes(estimate_peak)}")
    ax.set_xlabel("allocator events (sampled)")
    ax.set_ylabel("MiB")
    ax.set_title(f"{m.script}: {m.steps_completed} optimizer step(s) on {m.device}")
    ax.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


__all__ = ["CATEGORIES", "LayerMeasure", "LayerRow", "Measurement", "ModelComparison", "ModelMeasure", "calibration", "compare",
           "downsample", "plot", "render_text", "sparkline", "to_json"]
