"""Probe cuDNN's workspaces and reserve space, one layer at a time (run where a GPU is lent).

For RNNs (LSTM, GRU) and convolutions (Conv1d/2d, ConvTranspose2d) over a grid of sizes and
dtypes, it measures with the caching allocator's counters:
- `kept`: what the forward leaves allocated besides its output (for RNNs: the reserve space),
- `fwd_extra`: the forward's peak above what it leaves allocated (a workspace),
- `bwd_extra`: the backward's peak above what is live before it plus the gradients it produces.
The estimator's CUDA constants for these layers come from this table (bench/vram/cudnn_probe.json).

Usage (on the GPU machine): python3 bench/vram/cudnn_probe.py --out cudnn_probe.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def measure(make, shape, dtype):
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    layer = make().cuda()
    x = torch.randn(*shape, device="cuda", requires_grad=True)
    ctx = torch.autocast("cuda", dtype=dtype) if dtype is not None else torch.autocast("cuda", enabled=False)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with ctx:
        out = layer(x)
    y = out[0] if isinstance(out, tuple) else out
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated() - base
    fwd_peak = torch.cuda.max_memory_allocated() - base
    out_bytes = sum(t.untyped_storage().nbytes() for t in ([*out[:1], *(out[1] if isinstance(out[1], tuple) else [out[1]])]
                                                            if isinstance(out, tuple) else [out]))
    grad = torch.ones_like(y)
    torch.cuda.synchronize()
    before_bwd = torch.cuda.memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    y.backward(grad)
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - base
    grads = x.grad.untyped_storage().nbytes() + sum(p.grad.untyped_storage().nbytes() for p in layer.parameters() if p.grad is not None)
    return {"kept": after - out_bytes, "fwd_extra": fwd_peak - after, "out": out_bytes, "bwd_extra": bwd_peak - before_bwd - grads,
            "x": x.untyped_storage().nbytes(), "y": y.untyped_storage().nbytes()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="cudnn_probe.json")
    args = parser.parse_args()
    import torch
    import torch.nn as nn

    warm = nn.Linear(8, 8).cuda()  # the cuBLAS workspaces (forward and autograd threads) exist before the first row
    warm(torch.randn(4, 8, device="cuda", requires_grad=True)).sum().backward()
    rows = []
    for kind in ("LSTM", "GRU"):
        for b in (8, 32, 128):
            for t_len in (16, 64):
                for h, i in ((128, 64), (256, 128), (512, 512)):
                    for layers, bidir in ((1, False), (2, False), (1, True)):
                        for dtype in (None, torch.bfloat16):
                            cls = getattr(nn, kind)
                            r = measure(lambda cls=cls, i=i, h=h, layers=layers, bidir=bidir: cls(i, h, num_layers=layers, bidirectional=bidir,
                                                                                                  batch_first=True),
                                        (b, t_len, i), dtype)
                            rows.append({"layer": kind, "b": b, "t": t_len, "h": h, "i": i, "layers": layers, "dirs": 2 if bidir else 1,
                                         "dtype": "bf16" if dtype else "fp32", **r})
    for kind, mk in (("Conv2d", lambda c, k: nn.Conv2d(c, c, k, padding=k // 2, bias=False)),
                     ("ConvTranspose2d", lambda c, k: nn.ConvTranspose2d(c, c // 2, 4, stride=2, padding=1, bias=False)),
                     ("Conv1d", lambda c, k: nn.Conv1d(c, c, k, padding=k // 2, bias=False))):
        for b in (4, 16, 64, 256):
            for c in (16, 32, 64, 128):
                for hw in (8, 16, 32, 64):
                    for k in (1, 3):
                        for dtype in (None, torch.bfloat16):
                            if kind == "ConvTranspose2d" and k == 1:
                                continue
                            shape = (b, c, hw * 16) if kind == "Conv1d" else (b, c, hw, hw)
                            if b * c * hw * hw * 4 > 2**30:
                                continue
                            r = measure(lambda mk=mk, c=c, k=k: mk(c, k), shape, dtype)
                            rows.append({"layer": kind, "b": b, "c": c, "hw": hw, "k": k, "dtype": "bf16" if dtype else "fp32", **r})
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "cudnn": torch.backends.cudnn.version(), "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=0), encoding="utf-8")
    print(f"{len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
