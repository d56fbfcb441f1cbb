"""Every torch.nn layer and common op is modelled or reported by name as unknown (docs/estimator-coverage.md), every
modelled layer's output shape and parameter count equal torch's on the meta device, and every modelled op's output
shape, dtype and saved bytes (issue 18). Only this test imports torch."""

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


def test_every_op_is_modelled_or_named_unknown() -> None:
    for name, expr, _rule, status, shape, _dtype, _saved, note in coverage.op_rows():
        assert status in ("modelled", "unknown"), name
        if status == "unknown":
            called = expr.split("(")[0].rsplit(".", 1)[-1]
            assert called in note, (name, note)  # the estimator names the op it could not read
        else:
            assert shape is not None, name


def torch_op(torch: object, expr: str) -> tuple[tuple[int, ...], str, int]:
    """Output shape, dtype and saved activation bytes of one op on the meta device: the tensors autograd saves (read
    with saved_tensors_hooks), a view counted as its base, each base once, the parameters' left out."""
    import torch as t  # the same module: imported under its name for eval

    dtypes = {"float32": t.float32, "bool": t.bool, "int64": t.int64}
    with t.device("meta"):
        env = {name: t.randn(shape, requires_grad=True) if dtype == "float32" else t.zeros(shape, dtype=dtypes[dtype])
               for name, (shape, dtype, _) in coverage.TENSORS.items()}
        params = {id(env[name]) for name, (_, _, role) in coverage.TENSORS.items() if role == "parameter"}
        saved: list[object] = []
        with t.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x):
            out = eval(expr, {"torch": t, "F": t.nn.functional, **env})  # the probe table of bench/vram/coverage.py
    first = out[0] if isinstance(out, (tuple, list)) else out
    bases = {}
    for x in saved:
        base = x._base if x._base is not None else x  # type: ignore[attr-defined]
        if id(base) not in params:
            bases[id(base)] = base.numel() * base.element_size()  # type: ignore[attr-defined]
    return tuple(first.shape), str(first.dtype).removeprefix("torch."), sum(bases.values())


@pytest.mark.parametrize(("name", "expr"), [(name, expr) for name, expr, _ in coverage.OPS])
def test_modelled_ops_match_torch_on_the_meta_device(name: str, expr: str) -> None:
    torch = pytest.importorskip("torch")
    status, shape, dtype, saved, _ = coverage.probe_op(expr)
    if status != "modelled":
        pytest.skip(f"{name} is reported as unknown")
    t_shape, t_dtype, t_saved = torch_op(torch, expr)
    assert (shape, dtype) == (t_shape, t_dtype), name
    if name not in coverage.META_DIFFERS:
        assert saved == t_saved, name
