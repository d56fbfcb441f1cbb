"""Every torch.nn layer is modelled or reported by name as unknown (docs/estimator-coverage.md), and every modelled
layer's output shape and parameter count equal torch's on the meta device (issue 18). Only this test imports torch."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("coverage_page", ROOT / "bench" / "vram" / "coverage.py")
assert SPEC is not None and SPEC.loader is not None
coverage = importlib.util.module_from_spec(SPEC)
sys.modules["coverage_page"] = coverage
SPEC.loader.exec_module(coverage)


def test_the_coverage_page_is_fresh() -> None:
    assert coverage.PAGE.read_text(encoding="utf-8") == coverage.page(), "run: python bench/vram/coverage.py --write"


def test_every_layer_is_modelled_or_named_unknown() -> None:
    for name in coverage.TORCH_NN:
        status, _, _, note = coverage.probe(name)
        assert status in ("modelled", "unknown", "structure"), name
        if status == "unknown":
            assert note, name  # the estimator says why


def test_the_list_is_torch_nn() -> None:
    nn = pytest.importorskip("torch.nn")
    import inspect

    installed = {n for n, o in vars(nn).items() if inspect.isclass(o) and issubclass(o, nn.Module) and not n.startswith("_")}
    assert set(coverage.TORCH_NN) == installed


MODELLED = [n for n in coverage.TORCH_NN if n not in coverage.STRUCTURE]


@pytest.mark.parametrize("name", MODELLED)
def test_modelled_layers_match_torch_on_the_meta_device(name: str) -> None:
    torch = pytest.importorskip("torch")
    status, shape, count, _ = coverage.probe(name)
    if status != "modelled":
        pytest.skip(f"{name} is reported as unknown")
    args, in_shape = coverage.ARGS.get(name, ("", (2, 8)))
    with torch.device("meta"):
        layer = eval(f"torch.nn.{name}({args})", {"torch": torch, "nn": torch.nn})  # the probe table of bench/vram/coverage.py
        x = torch.randn(in_shape, dtype=torch.float32) if name not in ("Embedding", "EmbeddingBag") else torch.zeros(
            in_shape, dtype=torch.long)
        if name in coverage.LOSS:
            y = layer(x, torch.zeros(in_shape[0], dtype=torch.long) if name in ("CrossEntropyLoss", "NLLLoss") else x.sigmoid())
        elif name == "MultiheadAttention":
            y = layer(x, x, x)
        elif name in ("Bilinear", "TransformerDecoderLayer", "TransformerDecoder", "Transformer"):
            y = layer(x, x)
        else:
            y = layer(x)
    out = y[0] if isinstance(y, tuple) else y
    assert tuple(out.shape) == shape, name
    assert sum(p.numel() for p in layer.parameters()) == count, name
