"""Abstract values the estimator's interpreter computes with: tensors as shapes, modules as trees."""

from __future__ import annotations

import ast
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "uint16": 2, "bool": 1}
DTYPE_ALIASES = {
    "float": "float32", "float32": "float32", "fp32": "float32", "double": "float64", "float64": "float64",
    "half": "float16", "float16": "float16", "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
    "long": "int64", "int64": "int64", "int": "int32", "int32": "int32", "bool": "bool", "uint8": "uint8", "int8": "int8", "uint16": "uint16", "int16": "int16",
}
_ids = itertools.count(1)


class Unknown:
    """A value the estimator could not read; `reason` says why (for the assumptions)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"Unknown({self.reason!r})"


UNKNOWN = Unknown()


class Unread(Unknown):
    """A value of the user's data the estimate could not read, named where it is made (`data = torch.load(...)` at
    train.py:47; what a data file holds that is not data): its reason is said where it is used (a layer's input)."""

    __slots__ = ()


def is_unknown(value: Any) -> bool:
    return isinstance(value, Unknown)


@dataclass(eq=False)
class Storage:
    nbytes: int
    id: int = field(default_factory=lambda: next(_ids))


@dataclass(eq=False)
class Tensor:
    shape: tuple[int, ...]
    dtype: str = "float32"
    requires_grad: bool = False
    storage: Storage | None = None
    external: bool = False  # allocated outside the model's forward (the batch): counted under "other"
    contiguous: bool = True
    is_param: bool = False
    # shape checking (TPF501): the layers/ops since the last layer with weights, and whether the
    # shape rests on a guess (an unknown branch, an unknown dataset, torch.tensor(data))
    trail: tuple[Any, ...] = ()
    guessed: bool = False
    host: bool = False  # not torch's memory (a numpy memmap of a token file): never counted

    def __post_init__(self) -> None:
        if self.storage is None:
            self.storage = Storage(self.numel * ITEMSIZE.get(self.dtype, 4))

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE.get(self.dtype, 4)

    def view(self, shape: tuple[int, ...], contiguous: bool | None = None) -> Tensor:
        return Tensor(tuple(shape), self.dtype, self.requires_grad, self.storage, self.external,
                      self.contiguous if contiguous is None else contiguous, self.is_param, self.trail, self.guessed, self.host)


@dataclass(eq=False)
class Module:
    """One nn.Module instance: a catalog layer, a container or a user class."""

    type: str  # Linear, Sequential, a user class name
    line: int
    col: int
    catalog: bool = False
    params: dict[str, tuple[int, ...]] = field(default_factory=dict)  # own parameters
    buffers: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)  # catalog constructor arguments
    children: dict[str, Module] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)  # user-class instance attributes
    cls: Any = None  # ClassDef info for user classes
    name: str = ""
    dtype: str = "float32"
    tied: set[str] = field(default_factory=set)  # own params shared with another module (counted there)
    # filled by forward: bytes autograd saves attributed to this module, and the output shape
    saved_bytes: int = 0
    seen_forward: bool = False
    output_shape: tuple[Any, ...] | None = None
    output_bytes: int = 0
    id: int = field(default_factory=lambda: next(_ids))
    # shape checking (TPF501)
    end: tuple[int, int] | None = None  # end (0-based line, utf-8 col) of the constructor call
    doubtful: bool = False  # built on a guess (an unknown branch) or from arguments it could not read
    literals: dict[str, ast.expr] = field(default_factory=dict)  # constructor arguments written as integer literals
    path: str = ""  # dotted name inside the model being checked
    file: str = ""  # the file it is constructed in, when that is not the estimated file (line/col are in it)

    def own_param_count(self) -> int:
        return sum(math.prod(s) if s else 1 for n, s in self.params.items() if n not in self.tied)

    def own_param_sizes(self) -> list[int]:
        return [math.prod(s) if s else 1 for n, s in self.params.items() if n not in self.tied]

    def walk(self, prefix: str = "") -> list[tuple[str, Module]]:
        out = [(prefix, self)]
        for key, child in self.children.items():
            out.extend(child.walk(f"{prefix}.{key}" if prefix else key))
        return out

    def modules(self) -> list[Module]:
        seen: set[int] = set()
        out: list[Module] = []
        for _, m in self.walk():
            if m.id not in seen:
                seen.add(m.id)
                out.append(m)
        return out

    def named_parameters(self) -> list[tuple[str, ParamValue]]:
        """(dotted name, parameter) of every parameter, each once (a tied weight under its first name), as torch lists them."""
        out: list[tuple[str, ParamValue]] = []
        seen: set[int] = set()
        for prefix, m in self.walk():
            if m.id in seen:
                continue
            seen.add(m.id)
            for n, shape in m.params.items():
                if n not in m.tied:
                    out.append((f"{prefix}.{n}" if prefix else n, ParamValue(shape, m, n)))
        return out

    def param_count(self) -> int:
        return sum(m.own_param_count() for m in self.modules())

    def param_sizes(self) -> list[int]:
        return [s for m in self.modules() for s in m.own_param_sizes()]

    def buffer_bytes(self) -> int:
        return sum((math.prod(s) if s else 1) * ITEMSIZE.get(d, 4) for m in self.modules() for s, d in m.buffers.values())

    def set_dtype(self, dtype: str) -> None:
        for m in self.modules():
            m.dtype = dtype


@dataclass(eq=False)
class ParamValue:
    """nn.Parameter(...) before it is assigned to a module attribute, or `module.weight`."""

    shape: tuple[int, ...]
    owner: Module | None = None
    name: str = ""


@dataclass(eq=False)
class Obj:
    """An instance of a plain class (config dataclass, SimpleNamespace, argparse result)."""

    type: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Function:
    node: ast.FunctionDef | ast.Lambda | ast.AsyncFunctionDef
    env: Any  # the defining Scope
    owner: Any = None  # ClassValue for methods
    no_grad: bool = False  # decorated with @torch.no_grad() / @torch.inference_mode()
    config: Any = None  # decorated with @hydra.main(...): the config it is called with
    classmethod: bool = False  # decorated with @classmethod: bound to the class it is looked up on
    staticmethod: bool = False  # decorated with @staticmethod: bound to nothing (`self.preprocess(...)` passes no self)


@dataclass(eq=False)
class BoundMethod:
    func: Function
    self: Any


@dataclass(eq=False)
class ClassValue:
    node: ast.ClassDef
    env: Any
    bases: tuple[Any, ...]
    is_module: bool
    is_dataclass: bool
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    def lookup(self, name: str) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        for base in self.bases:
            if isinstance(base, ClassValue):
                found = base.lookup(name)
                if found is not None:
                    return found
        return None


@dataclass(eq=False)
class Qualified:
    """A reference to an external callable/module by qualified name, e.g. torch.nn.Linear."""

    name: str


@dataclass(eq=False)
class MethodRef:
    """`obj.method` on a value the interpreter models natively (tensor.view, list.append)."""

    obj: Any
    name: str


@dataclass(eq=False)
class Optimizer:
    kind: str  # SGD, Adam, AdamW, RMSprop, Adagrad, other
    model: Module | None
    momentum: bool = False
    foreach: bool | None = None
    fused: bool = False
    centered: bool = False
    eight_bit: bool = False
    line: int = 0
    history: int = 0  # LBFGS: history_size, the (step, gradient-difference) pairs it keeps
    max_iter: int = 0  # LBFGS: iterations (closure evaluations, at most 1.25x) per step


@dataclass(eq=False)
class Dataset:
    sample: tuple[tuple[tuple[int, ...], str], ...]  # per item: (shape, dtype)
    name: str = ""
    guessed: bool = False  # the sample shape is a default, not known (unknown dataset, a transform it cannot read)
    unknown: str = ""  # why its sample shape is not known, when an estimate that reads a batch of it must say so
    keys: tuple[Any, ...] = ()  # a sample that is a dict: its keys, in the order of `sample` (batches are dicts too)


@dataclass(eq=False)
class Loader:
    dataset: Dataset | None
    batch_size: int
    line: int = 0
    guessed: bool = False  # a collate_fn or a guessed dataset: the batch shape is not known
    file: str = ""  # the file it is built in
    batch_known: bool = True  # False: batch_size could not be read (batch_size holds the fallback)


@dataclass(eq=False)
class Transform:
    size: tuple[int, int] | None = None  # output H, W when it crops/resizes
    to_tensor: bool = False
    square_only: bool = False  # Resize(int): the size holds for square images only
    exact: bool = True  # False: the output shape is not known (Resize(int) keeps the aspect ratio, Lambda, Grayscale)


@dataclass(eq=False)
class ContextValue:
    kind: str  # no_grad, autocast, enable_grad, other
    dtype: str | None = None
    enabled: bool = True
