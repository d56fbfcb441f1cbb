"""`torch-preflight measure`: run a training script for a few optimizer steps and measure its memory.

The only part of torch-preflight that runs user code and imports torch, and only in one module:
`torch_preflight.measure.runtime` (installed with `pip install pytorch-preflight[measure]`). Everything
else in this package (the measurement's data types, the comparison with the static estimate, the
text/JSON report, the sparkline, the calibration file, the matplotlib plot) is torch-free, so it can
be tested and imported without torch.
"""

from __future__ import annotations

__all__: list[str] = []
