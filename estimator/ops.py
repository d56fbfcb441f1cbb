"""What calls do: torch functions, tensor methods, nn layer constructors and their forward()."""

from __future__ import annotations

import ast
import math
import os.path
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, configs, reshape
from torch_preflight.estimator.record import StepRecord, broadcast, norm_dim
from torch_preflight.estimator.values import (
    DTYPE_ALIASES,
    ITEMSIZE,
    UNKNOWN,
    ContextValue,
    Dataset,
    Function,
    Loader,
    Module,
    Obj,
    Optimizer,
    ParamValue,
    Qualified,
    Tensor,
    Transform,
    Unknown,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

SAVE_OUTPUT = {"relu", "relu6", "tanh", "sigmoid", "elu", "softmax", "log_softmax", "exp", "hardtanh"}
SAVE_INPUT = {"gelu", "silu", "leaky_relu", "mish", "softplus", "hardswish", "hardsigmoid", "selu", "celu", "sin", "cos", "log", "rsqrt", "sqrt", "abs", "pow"}
ACTIVATION_LAYERS = {
    "ReLU": "relu", "ReLU6": "relu6", "Tanh": "tanh", "Sigmoid": "sigmoid", "ELU": "elu", "GELU": "gelu", "SiLU": "silu",
    "LeakyReLU": "leaky_relu", "Mish": "mish", "Softplus": "softplus", "Hardswish": "hardswish", "Hardsigmoid": "hardsigmoid",
    "SELU": "selu", "CELU": "celu", "PReLU": "leaky_relu",
}
DATASETS = {
    "MNIST": ((1, 28, 28), 10), "FashionMNIST": ((1, 28, 28), 10), "KMNIST": ((1, 28, 28), 10), "EMNIST": ((1, 28, 28), 47),
    "CIFAR10": ((3, 32, 32), 10), "CIFAR100": ((3, 32, 32), 100), "SVHN": ((3, 32, 32), 10), "STL10": ((3, 96, 96), 10),
    "ImageNet": ((3, 224, 224), 1000), "ImageFolder": ((3, 224, 224), 1000), "FakeData": ((3, 224, 224), 10),
}

# torchvision transforms that keep the image's shape (anything else, e.g. Grayscale or Lambda, makes it unknown)
SHAPE_KEEPING_TRANSFORMS = {
    "Normalize", "RandomHorizontalFlip", "RandomVerticalFlip", "RandomRotation", "ColorJitter", "RandomAffine", "AutoAugment",
    "RandAugment", "TrivialAugmentWide", "AugMix", "RandomErasing", "ConvertImageDtype", "ToDtype", "GaussianBlur",
    "RandomPerspective", "RandomInvert", "RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast",
    "RandomEqualize",
}


def _flat(data: Any) -> list[Any]:
    return [v for item in data for v in _flat(item)] if isinstance(data, (list, tuple)) else [data]


def _literal_shape(data: Any, values_known: bool = True) -> tuple[int, ...] | None:
    """The shape of a (nested) list of numbers, or of a number; None when it is not one. With `values_known` False,
    an unread value counts as a number (`torch.tensor(encode(text), dtype=torch.long)`: the length is what matters)."""
    if (isinstance(data, (int, float)) and not isinstance(data, bool)) or (not values_known and is_unknown(data)):
        return ()
    if isinstance(data, (list, tuple)) and data:
        inner = {_literal_shape(v, values_known) for v in (data if len(data) <= 64 else (data[0], data[-1]))}
        if len(inner) == 1 and None not in inner:
            return (len(data), *next(iter(inner)))  # type: ignore[misc]
    return None


def container_base(mod: Module) -> str | None:
    """The torch.nn layer a user class derives from (directly or not): "Sequential", "Transformer", ...; None when it
    derives from nn.Module only."""
    from torch_preflight.estimator.values import ClassValue

    todo = [mod.cls] if mod.cls is not None else []
    while todo:
        cls = todo.pop()
        for base in cls.bases:
            kind = base.name.rsplit(".", 1)[-1] if isinstance(base, Qualified) and base.name.startswith("torch.nn.") else ""
            if kind in catalog.SIGNATURES:
                return kind
            if isinstance(base, ClassValue):
                todo.append(base)
    return None


def user_dataset(it: Interpreter, ds: Obj, node: ast.AST | None) -> Dataset | None:
    """A Dataset class of the script's own: its `__getitem__(0)` read as the sample (the default collate stacks them)."""
    from torch_preflight.estimator.values import BoundMethod, ClassValue, Function

    cls = ds.attrs.get("__class__")
    getitem = cls.lookup("__getitem__") if isinstance(cls, ClassValue) else None
    if not isinstance(getitem, Function):
        return None
    saved, before = it.grad_enabled, len(it.problems)
    it.grad_enabled = False  # building a sample records nothing
    try:
        sample = it.call(BoundMethod(getitem, ds), [0], {}, node)
    finally:
        it.grad_enabled = saved
    items = list(sample) if isinstance(sample, (tuple, list)) else [sample]
    if not items or not all(isinstance(t, Tensor) and all(isinstance(d, int) for d in t.shape) for t in items):
        it.problem(f"the samples of {ds.type} are not known tensors", node)
        return None
    # every tensor it returns has a known shape and dtype: what it could not read inside was values, which a sample's
    # memory does not depend on (a shape that depended on one would be unknown)
    del it.problems[before:]
    it.assume(f"{ds.type} samples: {', '.join('x'.join(map(str, t.shape)) or 'scalar' for t in items)}, as __getitem__(0) builds them",
              getattr(node, "lineno", 1) - 1)
    return Dataset(tuple((t.shape, t.dtype) for t in items), ds.type, guessed=any(t.guessed for t in items))


def numpy_call(it: Interpreter, short: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """np.memmap of a file of the project: a 1-D array as long as the file holds items (nanoGPT's token files)."""
    if short == "memmap" and args and isinstance(args[0], str):
        dtype = dtype_of(kwargs.get("dtype", args[1] if len(args) > 1 else "uint8")) or "uint8"
        path = configs.project_path(args[0], os.path.dirname(it.model.path))
        if kwargs.get("mode", "r+") == "r" and os.path.isfile(path):
            return Tensor((os.path.getsize(path) // ITEMSIZE.get(dtype, 1),), dtype, external=True, host=True)
    return Unknown(f"call `numpy.{short}`")


def dtype_of(value: Any) -> str | None:
    if isinstance(value, Qualified):
        return DTYPE_ALIASES.get(value.name.rsplit(".", 1)[-1])
    if isinstance(value, str):
        return DTYPE_ALIASES.get(value)
    return None


def ints(values: list[Any]) -> tuple[int, ...] | None:
    if len(values) == 1 and isinstance(values[0], (tuple, list)):
        values = list(values[0])
    if len(values) == 1 and isinstance(values[0], Obj) and values[0].type == "shape":
        values = list(values[0].attrs["dims"])
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return tuple(values)
    return None


# ---- qualified calls ---------------------------------------------------------------------------------
def call_qualified(it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int, col: int) -> Any:
    short = name.rsplit(".", 1)[-1]
    if name.startswith(("torch.nn.", "nn.")) and short in catalog.SIGNATURES and not name.startswith("torch.nn.functional"):
        return construct(it, short, args, kwargs, node, line, col)
    if name.startswith("torch.nn.init."):
        return args[0] if args else None  # initialisers fill a parameter in place
    if name == "contextlib.nullcontext":
        return ContextValue("other")
    if name.startswith("numpy."):
        return numpy_call(it, short, args, kwargs)
    if name.startswith("einops."):
        return einops_call(it, short, args, kwargs, node, line, col)
    if name.startswith("torch.nn.") and name.count(".") == 2 and short[:1].isupper() and short not in ("Parameter", "Module"):
        return unknown_layer(it, short, node, line, col)  # a torch.nn layer the catalog does not model: named, not guessed
    if name in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
        t = args[0] if args else kwargs.get("data")
        if isinstance(t, Tensor):
            return ParamValue(t.shape)
        if isinstance(t, ParamValue):
            return ParamValue(t.shape)
        it.problem("nn.Parameter of an unknown shape", node)
        return UNKNOWN
    if name.startswith("torch.optim.") or name.startswith("bitsandbytes.optim."):
        return make_optimizer(it, short, name, args, kwargs, line)
    if short == "GradScaler":
        return Obj("GradScaler")
    if name in ("torch.no_grad", "torch.inference_mode"):
        return ContextValue("no_grad")
    if name in ("torch.enable_grad",):
        return ContextValue("enable_grad")
    if name in ("torch.set_grad_enabled",):
        return ContextValue("enable_grad" if args and args[0] is True else "no_grad")
    if name in ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast", "torch.amp.autocast_mode.autocast"):
        dtype = dtype_of(kwargs.get("dtype"))
        if dtype is None:
            device = args[0] if args else kwargs.get("device_type", "cuda" if "cuda" in name else "cpu")
            dtype = "bfloat16" if device == "cpu" or "cpu" in name else "float16"
        return ContextValue("autocast", dtype, kwargs.get("enabled", True) is not False)
    if name in ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"):
        ds = args[0] if args else kwargs.get("dataset")
        bs = kwargs.get("batch_size", args[1] if len(args) > 1 else 1)
        known = isinstance(bs, int) and not isinstance(bs, bool)
        if it.batch_override:
            bs, known = it.batch_override, True
        elif not known:
            it.problem("DataLoader batch_size is not known (pass --batch-size)", node)
            bs = 1
        else:
            it.batch_sizes.append((bs, line))
        if isinstance(ds, Obj) and not isinstance(ds, Dataset):
            ds = user_dataset(it, ds, node) or ds
        guessed = "collate_fn" in kwargs or (isinstance(ds, Dataset) and ds.guessed) or it.guessing > 0
        return Loader(ds if isinstance(ds, Dataset) else None, bs, line, guessed=guessed, file=it.cur_path, batch_known=known)
    if name == "torch.utils.data.TensorDataset":
        sample = tuple((t.shape[1:], t.dtype) for t in args if isinstance(t, Tensor))
        return Dataset(sample, "TensorDataset", guessed=it.guessing > 0 or len(sample) != len(args))
    if name.startswith("torchvision.datasets."):
        shape, classes = DATASETS.get(short, ((3, 224, 224), 1000))
        tf = kwargs.get("transform")
        # the sample shape is known for the fixed-size datasets, or when the transform crops to a fixed size
        square = short in DATASETS and short not in ("ImageFolder", "ImageNet", "FakeData")
        known = square and isinstance(tf, Transform) and tf.exact and tf.to_tensor and (tf.size is None or tf.square_only is False or square)
        if isinstance(tf, Transform) and tf.size:
            shape = (shape[0], *tf.size)
            known = known or (short in ("ImageFolder", "ImageNet") and tf.exact and tf.to_tensor and not tf.square_only)
        if short == "FakeData" or len(args) > 4:
            known = False
        it.assume(f"{short} samples are {shape} images", line)
        _ = classes
        return Dataset(((shape, "float32"), ((), "int64")), short, guessed=not known or it.guessing > 0)
    if name.startswith("torchvision.transforms."):
        if short in ("Compose",):
            size = None
            square_only = False
            items = args[0] if args and isinstance(args[0], (list, tuple)) else None
            exact = items is not None and all(isinstance(t, Transform) and t.exact for t in items)
            to_tensor = False
            for t in items or []:
                if isinstance(t, Transform) and t.size:
                    size, square_only = t.size, t.square_only
                to_tensor = to_tensor or (isinstance(t, Transform) and t.to_tensor)
            return Transform(size, to_tensor=to_tensor, exact=exact, square_only=square_only)
        if short in ("RandomResizedCrop", "CenterCrop", "Resize", "RandomCrop"):
            s = args[0] if args else kwargs.get("size")
            if isinstance(s, int):
                # Resize(int) scales the shorter side: the output is square only for square images
                return Transform((s, s), square_only=short == "Resize")
            if isinstance(s, (tuple, list)) and len(s) == 2 and all(isinstance(v, int) for v in s):
                return Transform((s[0], s[1]))
            return Transform(exact=False)
        if short in ("ToTensor", "PILToTensor", "ToImage"):
            return Transform(to_tensor=True)
        return Transform(exact=short in SHAPE_KEEPING_TRANSFORMS)
    if name in ("torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"):
        return checkpoint(it, args, kwargs, node)
    if name.startswith("torch.nn.functional.") or name.startswith("torch.") or name.startswith("F."):
        out = torch_function(it, short, name, args, kwargs, node)
        if isinstance(out, Tensor) and out.external and not out.host and it.recorder is None and it.forward_depth == 0:
            it.setup_bytes = max(it.setup_bytes, out.nbytes)  # a tensor the script builds before its steps (a randperm)
        return out
    if name in ("dataclasses.field", "field"):
        if "default" in kwargs:
            return Obj("field", {"default": kwargs["default"]})
        factory = kwargs.get("default_factory")
        return Obj("field", {"default": it.call(factory, [], {}, node) if factory is not None else UNKNOWN})
    if name.startswith(("os.path.", "os.environ.")) or name == "os.getenv":
        return configs.os_call(name, args, kwargs, os.path.dirname(it.model.path))
    if name in ("torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel", "torch.nn.parallel.DataParallel"):
        return args[0] if args else UNKNOWN  # the wrapper holds the model's parameters (its buckets are not modelled)
    if name in ("lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer"):
        return Obj("Trainer", dict(kwargs))
    if name == "argparse.ArgumentParser":
        return configs.Parser()
    if name == "ast.literal_eval":
        return configs.literal_eval(args[0] if args else None)
    if name in ("types.SimpleNamespace", "argparse.Namespace"):
        return Obj("SimpleNamespace", dict(kwargs))
    if name.startswith("math."):
        fn = getattr(math, short, None)
        if fn is not None and all(isinstance(a, (int, float)) for a in args):
            try:
                return fn(*args)
            except Exception:
                return UNKNOWN
        return UNKNOWN
    return builtin(it, name, args, kwargs, node)


def builtin(it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    if name == "range":
        if all(isinstance(a, int) for a in args):
            return range(*args)
        return UNKNOWN
    if name == "len":
        v = args[0] if args else None
        if isinstance(v, Tensor):
            return v.shape[0] if v.shape else UNKNOWN
        if isinstance(v, Module):
            return len(v.children)
        if isinstance(v, Obj) and v.type == "shape":
            return len(v.attrs["dims"])
        try:
            return len(v)  # type: ignore[arg-type]
        except Exception:
            return UNKNOWN
    if name == "super":
        try:
            me = it.scope.lookup("self")
        except KeyError:
            me = None
        return Obj("super", {"self": me})
    if name in ("int", "float", "bool", "str", "abs", "round"):
        if args and not is_unknown(args[0]) and not isinstance(args[0], (Tensor, Obj)):
            try:
                fn: Any = {"int": int, "float": float, "bool": bool, "str": str, "abs": abs, "round": round}[name]
                return fn(*args)
            except Exception:
                return UNKNOWN
        return UNKNOWN if args else {"int": 0, "float": 0.0, "bool": False, "str": "", "abs": UNKNOWN, "round": UNKNOWN}[name]
    if name == "sorted" and args and isinstance(args[0], (list, tuple, set)) and all(isinstance(v, str) for v in args[0]):
        return sorted(args[0], reverse=kwargs.get("reverse") is True)
    if name in ("min", "max", "sum", "sorted", "any", "all", "divmod", "pow"):
        vals = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple, range)) else args
        if (vals and all(isinstance(v, (int, float)) for v in vals)) or (name in ("sum", "any", "all", "sorted") and all(isinstance(v, (int, float)) for v in vals)):
            try:
                if name in ("divmod", "pow"):
                    return (divmod if name == "divmod" else pow)(*vals)
                reducer: Any = {"min": min, "max": max, "sum": sum, "sorted": sorted, "any": any, "all": all}[name]
                return reducer(vals)
            except Exception:
                return UNKNOWN
        if name == "sum" and vals and all(isinstance(v, Tensor) for v in vals):
            out = vals[0]
            for v in vals[1:]:
                out = it.tensor_binop(ast.Add(), out, v, False)
            return out
        return UNKNOWN
    if name in ("list", "tuple"):
        if not args:
            return [] if name == "list" else ()
        items = it.iterate(args[0], node) if not isinstance(args[0], Obj) or args[0].type != "shape" else list(args[0].attrs["dims"])
        if items is None:
            return UNKNOWN
        return list(items) if name == "list" else tuple(items)
    if name == "dict":
        return dict(kwargs)
    if name in ("enumerate", "zip"):
        seqs = [it.iterate(a, node) for a in args]
        if any(s is None for s in seqs):
            return UNKNOWN
        items = list(enumerate(seqs[0])) if name == "enumerate" else list(zip(*seqs, strict=False))  # type: ignore[arg-type]
        return Obj(name, {"items": items})
    if name == "reversed":
        seq = it.iterate(args[0], node) if args else None
        return list(reversed(seq)) if seq is not None else UNKNOWN
    if name == "isinstance":
        kinds = args[1] if len(args) == 2 and isinstance(args[1], tuple) else args[1:2]
        plain = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "tuple": tuple, "dict": dict}
        if args and kinds and all(isinstance(k, Qualified) and k.name in plain for k in kinds) and isinstance(
                args[0], (int, float, bool, str, list, tuple, dict, type(None))):
            return isinstance(args[0], tuple(plain[k.name] for k in kinds))
        if args and isinstance(args[0], Module) and kinds and all(isinstance(k, Qualified) and k.name.startswith("torch.nn.")
                                                                  for k in kinds):
            # a layer's class among torch.nn classes (minGPT's weight-decay lists): a catalog layer is exactly its type
            names = {k.name.rsplit(".", 1)[-1] for k in kinds}
            return "Module" in names or (args[0].catalog and args[0].type in names)
        return UNKNOWN
    if name == "vars":
        return args[0].attrs if args and isinstance(args[0], Obj) else UNKNOWN  # the live __dict__
    if name == "globals":
        return it.module_vars()
    if name in ("open", "io.open", "builtins.open", "codecs.open"):
        mode = args[1] if len(args) > 1 else kwargs.get("mode", "r")
        return Obj("file", {"path": args[0], "mode": mode}) if args and isinstance(args[0], str) else UNKNOWN
    if name == "exec":
        if args and isinstance(args[0], configs.FileText):
            it.exec_file(args[0].path, node)
        else:
            it.problem("exec() of code that is not a file of the project", node)
        return None
    if name in ("getattr",):
        if len(args) >= 2 and isinstance(args[1], str):
            value = it.getattr(args[0], args[1], node or ast.Pass())
            if is_unknown(value) and len(args) == 3:
                return args[2]
            return value
        return UNKNOWN
    if name == "hasattr":
        # feature tests on torch (`hasattr(F, "scaled_dot_product_attention")`): the estimate models torch 2.x
        return True if args and isinstance(args[0], Qualified) and args[0].name.split(".")[0] == "torch" else UNKNOWN
    if name == "setattr":
        if len(args) == 3 and isinstance(args[1], str):
            it.setattr(args[0], args[1], args[2], node or ast.Pass())
        return None
    if name == "set":
        items = it.iterate(args[0], node) if args else []
        return set(items) if items is not None and all(isinstance(v, (str, int, float, tuple)) for v in items) else UNKNOWN
    if name == "iter" and args and isinstance(args[0], (Loader, list, tuple)):
        return Obj("iterator", {"source": args[0]})
    if name == "next" and args and isinstance(args[0], (Obj, Loader)) and (isinstance(args[0], Loader) or args[0].type == "iterator"):
        source = args[0] if isinstance(args[0], Loader) else args[0].attrs["source"]
        items = it.iterate(source, node or ast.Pass())  # a loader's next batch; a list's first item
        return items[0] if items else (args[1] if len(args) > 1 else UNKNOWN)
    if name in ("print", "iter", "next", "type", "map"):
        return UNKNOWN if name != "print" else None
    return Unknown(f"call `{name}`")


# ---- construction ---------------------------------------------------------------------------------
LIGHTNING_PRECISION = {"bf16-mixed": "bfloat16", "16-mixed": "float16", "16": "float16", 16: "float16", "bf16": "bfloat16"}


def lightning_fit(it: Interpreter, trainer: Obj, model: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> None:
    """`Trainer(precision=..., accumulate_grad_batches=...).fit(model, loader | datamodule)`: Lightning owns the loop, so
    one step is read from the LightningModule itself: its first batch through `training_step`, backward with the
    gradients cleared to None before it, the optimizer from `configure_optimizers`, under the precision's autocast."""
    from torch_preflight.estimator.values import BoundMethod, Function, MethodRef

    def method(owner: Any, attr: str) -> Any:
        found = it.getattr(owner, attr, node or ast.Pass())
        return it.call(found, [], {}, node) if isinstance(found, (BoundMethod, Function, MethodRef)) else None

    loader = kwargs.get("train_dataloaders", args[0] if args else None)
    datamodule = kwargs.get("datamodule")
    if not isinstance(loader, Loader):
        loader = method(datamodule, "train_dataloader") if datamodule is not None else method(model, "train_dataloader")
    if not any(o for o in it.optimizers):
        method(model, "configure_optimizers")
    step = it.getattr(model, "training_step", node or ast.Pass())
    if not isinstance(loader, Loader) or not isinstance(step, BoundMethod):
        it.problem("Trainer.fit: the training batches or training_step are not known", node)
        return None
    precision = trainer.attrs.get("precision", "32-true")
    accumulate = trainer.attrs.get("accumulate_grad_batches", 1)
    line = getattr(node, "lineno", 1) - 1
    saved = (it.autocast, it.grad_enabled)
    it.autocast = it.force_autocast or LIGHTNING_PRECISION.get(precision)
    if it.autocast:
        it.assume(f"Lightning precision={precision!r}: autocast {it.autocast}", line)
    it.grad_enabled = True
    it.zero_grad_seen = True
    it.zero_grad_set_to_none = not (isinstance(accumulate, int) and accumulate > 1)  # Lightning clears gradients to None
    if not it.zero_grad_set_to_none:
        it.assume(f"accumulate_grad_batches={accumulate}: gradients stay allocated between micro-batches", line)
    try:
        batch = it.loader_batch(loader, node or ast.Pass())
        out = it.call(step, [batch, 0], {}, node)
        loss = out.get("loss") if isinstance(out, dict) else out
        if isinstance(loss, Tensor):
            backward(it, loss, node)
        else:
            it.problem("training_step's loss is not a known tensor", node)
    finally:
        it.autocast, it.grad_enabled = saved
    return None


LIST_METHODS = {"append", "insert", "pop", "remove", "clear", "reverse", "index", "count", "copy"}
DICT_METHODS = {"get", "setdefault", "pop", "popitem", "clear", "copy"}


def container_method(it: Interpreter, obj: list[Any] | dict[Any, Any], name: str, args: list[Any], kwargs: dict[str, Any],
                     node: ast.AST | None) -> Any:
    """A list's or dict's method on the interpreter's values, as Python runs it; one it does not model is reported (a
    mutation skipped in silence would leave a wrong value: `vocab.setdefault(word, len(vocab))` building a vocabulary)."""
    if isinstance(obj, list) and name == "extend" and args:
        obj.extend(it.iterate(args[0], node or ast.Pass()) or [])
        return None
    if isinstance(obj, dict):
        visible = {k: v for k, v in obj.items() if k != "__class__"}  # an instance's __dict__ holds its class
        if name == "items":
            return Obj("items", {"items": list(visible.items())})
        if name in ("keys", "values"):
            return list(visible.keys() if name == "keys" else visible.values())
        if name == "update" and (kwargs or (args and isinstance(args[0], dict))):
            obj.update(*args[:1], **kwargs)
            return None
    if name in (LIST_METHODS if isinstance(obj, list) else DICT_METHODS) and not any(is_unknown(a) for a in args):
        try:
            return getattr(obj, name)(*args, **kwargs)
        except (IndexError, KeyError, ValueError, TypeError):
            return UNKNOWN
    it.problem(f"{type(obj).__name__}.{name}() is not modelled", node)
    return UNKNOWN


def unknown_layer(it: Interpreter, kind: str, node: ast.AST | None, line: int, col: int) -> Module:
    """A torch.nn layer the estimator does not model: it is listed, with its parameters and forward unknown."""
    mod = Module(kind, line, col, catalog=True)
    mod.file = it.foreign_file()
    mod.doubtful = True
    mod.args["incomplete"] = f"nn.{kind} is not modelled"
    it.problem(f"nn.{kind} is not modelled", node)
    return mod


def construct(it: Interpreter, kind: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int, col: int) -> Any:
    mod = Module(kind, line, col, catalog=True)
    mod.file = it.foreign_file()
    mod.doubtful = it.guessing > 0
    if isinstance(node, ast.Call):
        mod.end = ((node.end_lineno or node.lineno) - 1, node.end_col_offset or 0)
        mod.literals = literal_args(kind, node)
    if kind == "Sequential":
        if len(args) == 1 and isinstance(args[0], dict):
            mod.children = {str(k): v for k, v in args[0].items() if isinstance(v, Module)}
        else:
            mods = [a for a in args if isinstance(a, Module)]
            if len(mods) != len(args):
                it.problem("nn.Sequential with an element that is not a known layer", node)
                mod.args["incomplete"] = "an element that is not a known layer"
                mod.doubtful = True
            mod.children = {str(i): m for i, m in enumerate(mods)}
        return mod
    if kind in ("ModuleList", "ModuleDict"):
        items = args[0] if args else kwargs.get("modules")
        if isinstance(items, dict):
            mod.children = {str(k): v for k, v in items.items() if isinstance(v, Module)}
        elif items is not None:
            seq = it.iterate(items, node) or []
            mods = [m for m in seq if isinstance(m, Module)]
            if len(mods) != len(seq):
                it.problem(f"nn.{kind} with an element that is not a known layer", node)
                mod.doubtful = True
            mod.children = {str(i): m for i, m in enumerate(mods)}
        return mod
    a = catalog.bind(kind, args, kwargs)
    mod.args = a
    try:
        if kind in ("TransformerEncoder", "TransformerDecoder"):
            layer, n = a.get("encoder_layer", a.get("decoder_layer")), a.get("num_layers")
            if not isinstance(layer, Module) or not isinstance(n, int):
                raise catalog.CatalogError("the layer or num_layers is not known")
            mod.children["layers"] = Module("ModuleList", line, col, catalog=True, children={str(i): clone(layer) for i in range(n)})
            if isinstance(a.get("norm"), Module):
                mod.children["norm"] = a["norm"]
            return mod
        if kind in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
            d, h, ff = a["d_model"], a["nhead"], a["dim_feedforward"]
            bias = a.get("bias", True)
            mk = lambda k, *xs, **kw: construct(it, k, list(xs), kw, node, line, col)  # noqa: E731
            mod.children["self_attn"] = mk("MultiheadAttention", d, h, dropout=a["dropout"], bias=bias, batch_first=a["batch_first"])
            if kind == "TransformerDecoderLayer":
                mod.children["multihead_attn"] = mk("MultiheadAttention", d, h, dropout=a["dropout"], bias=bias, batch_first=a["batch_first"])
            mod.children["linear1"] = mk("Linear", d, ff, bias=bias)
            mod.children["dropout"] = mk("Dropout", a["dropout"])
            mod.children["linear2"] = mk("Linear", ff, d, bias=bias)
            for i in (1, 2, 3) if kind == "TransformerDecoderLayer" else (1, 2):
                mod.children[f"norm{i}"] = mk("LayerNorm", d, eps=a["layer_norm_eps"], bias=bias)
            for i in (1, 2, 3) if kind == "TransformerDecoderLayer" else (1, 2):
                mod.children[f"dropout{i}"] = mk("Dropout", a["dropout"])
            return mod
        if kind == "Transformer":
            d, h = a["d_model"], a["nhead"]
            enc_layer = construct(it, "TransformerEncoderLayer", [d, h, a["dim_feedforward"], a["dropout"]], {"batch_first": a["batch_first"], "bias": a["bias"]}, node, line, col)
            dec_layer = construct(it, "TransformerDecoderLayer", [d, h, a["dim_feedforward"], a["dropout"]], {"batch_first": a["batch_first"], "bias": a["bias"]}, node, line, col)
            norm_e = construct(it, "LayerNorm", [d], {"bias": a["bias"]}, node, line, col)
            norm_d = construct(it, "LayerNorm", [d], {"bias": a["bias"]}, node, line, col)
            mod.children["encoder"] = construct(it, "TransformerEncoder", [enc_layer, a["num_encoder_layers"], norm_e], {}, node, line, col)
            mod.children["decoder"] = construct(it, "TransformerDecoder", [dec_layer, a["num_decoder_layers"], norm_d], {}, node, line, col)
            return mod
        if kind == "MultiheadAttention":
            e = a["embed_dim"]
            mod.params, mod.buffers = catalog.layer_params(kind, a)
            mod.children["out_proj"] = construct(it, "Linear", [e, e], {"bias": a.get("bias", True)}, node, line, col)
            mod.children["out_proj"].type = "NonDynamicallyQuantizableLinear"
            return mod
        mod.params, mod.buffers = catalog.layer_params(kind, a)
    except (catalog.CatalogError, TypeError, KeyError) as exc:
        it.problem(f"nn.{kind}: {exc}", node)
        mod.args["incomplete"] = str(exc) or type(exc).__name__
        mod.doubtful = True
    return mod


def _int_literal(node: ast.expr) -> bool:
    """`400`, `16 * 5 * 5`: integer constants and arithmetic on them, nothing else."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        return _int_literal(node.left) and _int_literal(node.right)
    return False


def literal_args(kind: str, node: ast.Call) -> dict[str, ast.expr]:
    """The constructor's arguments written as integer literals, by parameter name."""
    names = [name for name, _ in catalog.SIGNATURES.get(kind, ())]
    out: dict[str, ast.expr] = {}
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            return {}
        if i < len(names) and _int_literal(arg):
            out[names[i]] = arg
    for kw in node.keywords:
        if kw.arg is None:
            return {}
        if _int_literal(kw.value):
            out[kw.arg] = kw.value
    return out


def clone(mod: Module) -> Module:
    copy = Module(mod.type, mod.line, mod.col, mod.catalog, dict(mod.params), dict(mod.buffers), dict(mod.args),
                  {k: clone(v) for k, v in mod.children.items()}, dict(mod.attrs), mod.cls, dtype=mod.dtype)
    copy.file = mod.file
    return copy


def make_optimizer(it: Interpreter, short: str, name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
    if short.startswith("lr_scheduler") or "lr_scheduler" in name:
        return UNKNOWN
    params = args[0] if args else kwargs.get("params")
    model = None
    if isinstance(params, Obj) and params.type == "parameters":
        model = params.attrs["module"]
    elif isinstance(params, list) and params and isinstance(params[0], dict):
        mods = [p.get("params") for p in params]
        model = next((m.attrs["module"] for m in mods if isinstance(m, Obj) and m.type == "parameters"), None)
    kind = short.replace("8bit", "").replace("PagedAdamW", "AdamW")
    momentum = kwargs.get("momentum", args[2] if short == "SGD" and len(args) > 2 else 0)
    opt = Optimizer(kind, model, momentum=bool(momentum) if not is_unknown(momentum) else True,
                    foreach=kwargs.get("foreach") if isinstance(kwargs.get("foreach"), bool) else None,
                    fused=kwargs.get("fused") is True, centered=kwargs.get("centered") is True,
                    eight_bit="8bit" in short or name.startswith("bitsandbytes"), line=line)
    opt.weight_decay = kwargs.get("weight_decay", 0) not in (0, 0.0)  # type: ignore[attr-defined]
    it.optimizers.append(opt)
    return opt


def checkpoint(it: Interpreter, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    fn, rest = (args[0], args[1:]) if args else (None, [])
    if it.recorder is None or not it.grad_enabled:
        return it.call(fn, list(rest), {k: v for k, v in kwargs.items() if k not in ("use_reentrant", "preserve_rng_state")}, node)
    it.checkpointed = True
    rec = it.recorder
    before_ops = len(rec.ops)
    before_saved = dict(rec.saved)
    out = it.call(fn, list(rest), {k: v for k, v in kwargs.items() if k not in ("use_reentrant", "preserve_rng_state")}, node)
    inner = rec.ops[before_ops:]
    recompute = sum(b for sid, (b, _) in rec.saved.items() if sid not in before_saved)
    params = [p for op in inner for p in op.params]
    # undo what the segment saved: only its inputs stay saved
    for sid in [s for s in rec.saved if s not in before_saved]:
        del rec.saved[sid]
    del rec.ops[before_ops:]
    inputs = [a for a in rest if isinstance(a, Tensor)]
    if isinstance(out, Tensor):
        out = Tensor(out.shape, out.dtype)
        it.record(out, inputs, inputs)
        if rec.ops and rec.ops[-1].out_bytes == out.nbytes:
            rec.ops[-1].params = params
            rec.ops[-1].recompute = recompute
    return out


# ---- tensor functions ---------------------------------------------------------------------------
def new_tensor(it: Interpreter, shape: tuple[int, ...] | None, dtype: str, node: ast.AST | None, batch: bool = True) -> Any:
    if shape is None:
        it.problem("a tensor of unknown shape", node)
        return UNKNOWN
    external = it.forward_depth == 0
    if external and batch and it.batch_override and shape and it.recorder is None:
        shape = (it.batch_override, *shape[1:])
    if external and shape and it.recorder is None and it.in_script:
        it.batch_sizes.append((shape[0], getattr(node, "lineno", 1) - 1))
    return Tensor(shape, dtype, external=external, guessed=it.guessing > 0)


def torch_function(it: Interpreter, short: str, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    args = [it.param_tensor(a) if isinstance(a, ParamValue) else a for a in args]
    dtype = dtype_of(kwargs.get("dtype")) or "float32"
    if short in ("randn", "rand", "zeros", "ones", "empty", "full"):
        dims = args[:-1] if short == "full" else args
        return new_tensor(it, ints(dims) if dims else ints([kwargs.get("size", ())]), dtype, node)
    if short in ("randn_like", "zeros_like", "ones_like", "empty_like", "rand_like"):
        t = args[0] if args else None
        return Tensor(t.shape, dtype_of(kwargs.get("dtype")) or t.dtype, external=it.forward_depth == 0) if isinstance(t, Tensor) else UNKNOWN
    if short == "randint":
        size = kwargs.get("size", args[-1] if args else None)
        return new_tensor(it, ints([size]) if size is not None else None, dtype_of(kwargs.get("dtype")) or "int64", node)
    if short == "randperm" and args and isinstance(args[0], int):
        return Tensor((args[0],), dtype_of(kwargs.get("dtype")) or "int64", external=True)
    if short == "arange":
        nums = [a for a in args if isinstance(a, int)]
        n = len(range(*nums)) if nums else None
        return Tensor((n,), "int64", external=True) if n is not None else UNKNOWN
    if short in ("tensor", "as_tensor", "from_numpy"):
        data = args[0] if args else kwargs.get("data")
        wanted = dtype_of(kwargs.get("dtype"))
        if isinstance(data, Tensor):  # a numpy array modelled as a tensor, or a tensor
            return Tensor(data.shape, wanted or data.dtype, external=True, guessed=data.guessed)
        literal = _literal_shape(data, values_known=wanted is None)  # with a dtype, unread values are fine
        if literal is not None:
            is_float = any(isinstance(v, float) for v in _flat(data))
            return Tensor(literal, wanted or ("float32" if is_float or short == "from_numpy" else "int64"), external=True)
        if it.checker is not None:
            it.doubt("the shape of torch.tensor(data) is not known")
            return Tensor((), wanted or "float32", external=True, guessed=True)
        it.problem(f"the shape of torch.{short}(...) is not known", node)
        return UNKNOWN
    if short == "multinomial" and args and isinstance(args[0], Tensor):
        n = kwargs.get("num_samples", args[1] if len(args) > 1 else None)
        return Tensor((*args[0].shape[:-1], n), "int64", external=it.forward_depth == 0) if isinstance(n, int) else UNKNOWN
    if short in ("tril", "triu") and args and isinstance(args[0], Tensor):
        return Tensor(args[0].shape, args[0].dtype, external=args[0].external)
    if short in ("device", "manual_seed", "set_float32_matmul_precision", "compile", "is_available", "set_num_threads", "clip_grad_norm_", "clip_grad_value_"):
        return args[0] if short == "compile" and args else None
    tensors = [a for a in args if isinstance(a, Tensor)]
    if short in ("cat", "concat", "stack"):
        seq = args[0] if args else kwargs.get("tensors")
        items = [t.tensor if False else t for t in (seq or []) if isinstance(t, Tensor)] if isinstance(seq, (list, tuple)) else []
        if not items or len(items) != len(seq):  # type: ignore[arg-type]
            it.problem(f"torch.{short} of unknown tensors", node)
            return UNKNOWN
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        if it.checker is not None and not it.checker.cat(short, items, dim, node):
            it.problem(f"torch.{short} of tensors whose shapes do not match", node)
            return UNKNOWN
        base = list(items[0].shape)
        if short == "stack":
            d = norm_dim(dim, len(base) + 1)
            shape = (*base[:d], len(items), *base[d:])
        else:
            d = norm_dim(dim, len(base))
            base[d] = sum(t.shape[d] for t in items)
            shape = tuple(base)
        return it.elementwise(items, shape, "cat")
    if short in ("matmul", "bmm", "mm"):
        return it.matmul(args[0], args[1]) if len(args) >= 2 else UNKNOWN
    if short == "linear":
        x, w = args[0], args[1]
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        if not isinstance(x, Tensor) or not isinstance(w, Tensor):
            return UNKNOWN
        xs, ws = it.autocast_inputs([x, w])
        xs = cuda_linear_input(it, x, xs, isinstance(b, Tensor))
        out = Tensor((*x.shape[:-1], w.shape[0]), xs.dtype)
        return it.record(out, [xs, ws, *([b] if isinstance(b, Tensor) else [])], [xs, ws])
    if not tensors:
        return Unknown(f"`{name}` on unknown values")
    x = tensors[0]
    if short in SAVE_OUTPUT or short in SAVE_INPUT or short in ("dropout", "softmax", "log_softmax"):
        return activation(it, short, x, kwargs, args)
    if short in ("add", "sub", "mul", "div", "maximum", "minimum", "where"):
        ops_ = {"add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div()}
        if short in ops_ and len(args) >= 2:
            return it.tensor_binop(ops_[short], args[0], args[1], False)
        shape = x.shape
        for t in tensors[1:]:
            shape = broadcast(shape, t.shape) or shape
        return it.elementwise(tensors, shape, short, tensors)
    if short in ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "binary_cross_entropy_with_logits",
                 "binary_cross_entropy", "huber_loss", "kl_div"):
        return loss(it, short, args[0], args[1] if len(args) > 1 else kwargs.get("target"), kwargs)
    if short in ("layer_norm", "rms_norm", "group_norm", "batch_norm"):
        return norm(it, short, x, tensors[1:], kwargs)
    if short == "embedding":
        idx, w = args[0], args[1]
        if isinstance(idx, Tensor) and isinstance(w, Tensor):
            return it.record(Tensor((*idx.shape, w.shape[1]), w.dtype), [w], [idx])
    if short in ("scaled_dot_product_attention",):
        return sdpa(it, args, kwargs)
    if short in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"):
        d = int(short[-2])
        k = args[1] if len(args) > 1 else kwargs.get("kernel_size")
        s = args[2] if len(args) > 2 else kwargs.get("stride")
        p = args[3] if len(args) > 3 else kwargs.get("padding", 0)
        return pool(it, x, d, k, s or k, p, 1, short.startswith("max"), False)
    if short.startswith("adaptive_avg_pool") or short.startswith("adaptive_max_pool"):
        d = int(short[-2])
        size = args[1] if len(args) > 1 else kwargs.get("output_size")
        return adaptive_pool(it, x, d, size, "max" in short)
    if short in ("interpolate", "upsample"):
        return interpolate(it, x, kwargs.get("size", args[1] if len(args) > 1 else None), kwargs.get("scale_factor"))
    if short in ("flatten",):
        return tensor_method(it, x, "flatten", args[1:], kwargs, node)
    if short in ("sum", "mean", "amax", "max", "min", "var", "std", "logsumexp", "norm", "transpose", "permute", "reshape",
                 "chunk", "split", "unsqueeze", "squeeze", "masked_fill", "clamp", "pad", "one_hot", "normalize", "argmax", "topk",
                 "einsum", "outer", "repeat_interleave", "sign", "floor", "round", "square", "neg", "roll", "erf", "gather"):
        if short == "pad":
            pads = args[1] if len(args) > 1 else kwargs.get("pad")
            padded = list(x.shape)
            if isinstance(pads, (tuple, list)) and all(isinstance(v, int) for v in pads):
                for i in range(len(pads) // 2):
                    padded[-1 - i] += pads[2 * i] + pads[2 * i + 1]
            return it.elementwise([x], tuple(padded), "pad")
        if short == "one_hot":
            n = args[1] if len(args) > 1 else kwargs.get("num_classes")
            return Tensor((*x.shape, n), "int64") if isinstance(n, int) else UNKNOWN
        if short == "normalize":
            return it.elementwise([x], x.shape, "normalize", [x])
        return tensor_method(it, x, short, args[1:], kwargs, node)
    if short in ("conv1d", "conv2d", "conv_transpose2d"):
        it.problem(f"F.{short} is not modelled", node)
        return UNKNOWN
    it.problem(f"`{name}` is not modelled", node)
    return Unknown(f"`{name}`")


def activation(it: Interpreter, kind: str, x: Tensor, kwargs: dict[str, Any], args: list[Any]) -> Any:
    inplace = kwargs.get("inplace") is True
    if kind == "dropout":
        p = kwargs.get("p", args[1] if len(args) > 1 and isinstance(args[1], (int, float)) else 0.5)
        training = kwargs.get("training", True)
        if not p or training is False or not it.grad_enabled:
            return x
        mask = Tensor(x.shape, "bool" if it.device == "cuda" else x.dtype)
        return it.record(Tensor(x.shape, x.dtype), [x], [mask], extra_transient=0)
    dtype = x.dtype
    if kind in ("softmax", "log_softmax") and it.autocast:
        # CUDA autocast runs them in float32; CPU autocast has no policy for them: they keep the input's dtype
        dtype = "float32" if it.device == "cuda" else x.dtype
        if dtype != x.dtype:
            x = Tensor(x.shape, dtype, requires_grad=x.requires_grad)  # the cast copy (not saved)
    if inplace and kind in SAVE_OUTPUT:
        x.storage = x.storage  # same storage: the output is the input
        out = x.view(x.shape)
        out = it.record(out, [x], [out])
        return out
    out = Tensor(x.shape, dtype)
    saved = [out] if kind in SAVE_OUTPUT or kind in ("softmax", "log_softmax") else [x]
    return it.record(out, [x], saved)


# losses whose float32 unreduced buffer lives as long as the loss value on CUDA (measured; the other
# pointwise losses were not measured and are left as they were)
CUDA_LOSS_HOLDS_UNREDUCED = ("mse_loss", "binary_cross_entropy")


def loss(it: Interpreter, kind: str, pred: Any, target: Any, kwargs: dict[str, Any]) -> Any:
    if not isinstance(pred, Tensor):
        return UNKNOWN
    saved: list[Tensor] = []
    if it.recorder is not None and isinstance(target, Tensor) and target.external and not target.is_param:
        it.recorder.batch.append(target)
    if kind == "cross_entropy" and it.device == "cuda" and it.autocast and pred.dtype in ("bfloat16", "float16"):
        # CUDA autocast: cross_entropy_loss (not on autocast's lists) calls log_softmax with the logits'
        # own dtype, so log_softmax runs in bf16 and saves its bf16 output; nll_loss is on the float32
        # list, so it gets a float32 cast of that output, which it saves. Measured on the H200
        # (lstm_lm b128 bf16 snapshot: 17920000 B bf16 then 35840000 B fp32 allocated by cross_entropy,
        # no float32 copy of the logits; the fp32 one is freed after nll_loss's backward, the bf16 one
        # after log_softmax's)
        logp = Tensor(pred.shape, pred.dtype)
        it.record(logp, [pred], [logp])
        pred = it.record(Tensor(pred.shape, "float32"), [logp], [])
        saved = [pred, *([target] if isinstance(target, Tensor) else [])]
    elif kind == "cross_entropy":
        # autocast runs cross-entropy in float32 on both backends (measured: CPU log_softmax output is fp32)
        dtype = "float32" if it.autocast else pred.dtype
        if dtype != pred.dtype:
            # autocast casts the logits to float32 first (a copy, not saved); its backward
            # converts the float32 gradient of log_softmax back to the logits' dtype
            pred = it.record(Tensor(pred.shape, dtype), [pred], [])
        logp = Tensor(pred.shape, dtype)
        it.record(logp, [pred], [logp])
        pred = logp
        if isinstance(target, Tensor):
            saved = [target]
    elif kind in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits", "binary_cross_entropy", "kl_div"):
        saved = [pred] + ([target] if isinstance(target, Tensor) else [])
        if it.autocast and it.device == "cuda" and pred.dtype != "float32":
            cast = Tensor(pred.shape, "float32", requires_grad=pred.requires_grad)
            saved = [cast, *saved[1:]]
        if it.device == "cuda" and kind in CUDA_LOSS_HOLDS_UNREDUCED and it.recorder is not None and pred.requires_grad:
            # the H200 snapshots: mse_loss (dcgan, every batch, fp32 and bf16) and binary_cross_entropy
            # (vae, batch 64 to 512) allocate a float32 buffer the size of their input that is freed only
            # when the script rebinds `loss` in the next iteration (after the next loss exists), so it is
            # live through backward, the optimizer step and the next forward: 16x3x32x32x4 = 196608 B in
            # dcgan at batch 16, 512x784x4 = 1605632 B in vae at batch 512
            it.recorder.batch.append(Tensor(pred.shape, "float32"))
    out = Tensor((), "float32")
    return it.record(out, [pred], saved)


def norm(it: Interpreter, kind: str, x: Tensor, params: list[Tensor], kwargs: dict[str, Any], mod: Module | None = None, n_groups: int = 1) -> Tensor:
    dtype = x.dtype
    # CPU autocast has no policy for the norms: they run in the input's dtype (a float32 residual
    # stream stays float32, and the next linear saves its own bf16 cast of the output). CUDA autocast
    # runs layer_norm and group_norm in float32; batch_norm is on none of its lists (cuDNN takes the
    # low-precision input with float32 weights), so it stays in the input's dtype there too.
    if it.autocast and kind in ("layer_norm", "group_norm") and it.device == "cuda":
        dtype = "float32"
    xin = x if dtype == x.dtype else Tensor(x.shape, dtype, requires_grad=x.requires_grad)
    if kind == "batch_norm":
        c = x.shape[1] if len(x.shape) > 1 else x.shape[0]
        stats = [Tensor((c,), "float32"), Tensor((c,), "float32")]
    elif kind == "group_norm":
        stats = [Tensor((x.shape[0], n_groups), "float32"), Tensor((x.shape[0], n_groups), "float32")]
    elif kind == "rms_norm":
        n_norm = math.prod(mod.params.get("weight", (x.shape[-1],))) if mod else x.shape[-1]
        rows = x.numel // max(n_norm, 1)
        stats = [Tensor((rows,), "float32")]
        out = Tensor(x.shape, dtype)
        return it.record(out, [xin, *params], [xin, *stats], params=mod)
    else:
        shape = mod.args.get("normalized_shape") if mod else None
        n_norm = math.prod(shape) if isinstance(shape, (tuple, list)) else (shape if isinstance(shape, int) else x.shape[-1])
        rows = x.numel // max(n_norm, 1)
        stats = [Tensor((rows,), "float32"), Tensor((rows,), "float32")]
    out = Tensor(x.shape, dtype)
    # CPU batch_norm backward allocates a temporary the size of its input next to grad_input
    work = xin.nbytes if kind == "batch_norm" and it.device == "cpu" else 0
    return it.record(out, [xin, *params], [xin, *stats], params=mod, backward_transient=work)


def sdpa(it: Interpreter, args: list[Any], kwargs: dict[str, Any]) -> Any:
    q, k, v = (args + [None] * 3)[:3]
    if not all(isinstance(t, Tensor) for t in (q, k, v)):
        return UNKNOWN
    if it.device == "cuda" and kwargs.get("attn_mask") is None and (len(args) < 4 or args[3] is None):
        # CUDA picks a fused kernel (flash attention for 16-bit, memory-efficient attention for fp32,
        # dropout included): it saves q, k, v, its output and the float32 log-sum-exp per query row,
        # never the L x S score matrix (measured on an H200: nn.TransformerEncoderLayer in bench/vram/vit.py)
        out = Tensor((*q.shape[:-1], v.shape[-1]), q.dtype)
        lse = Tensor(q.shape[:-1], "float32")
        return it.record(out, [q, k, v], [q, k, v, out, lse])
    # math-equivalent accounting: attention scores are materialised on the CPU backward path
    scores = it.matmul(q, it.tensor_view(k, "transpose", -2, -1))
    if not isinstance(scores, Tensor):
        return UNKNOWN
    probs = activation(it, "softmax", scores, {}, [])
    p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
    if isinstance(p, (int, float)) and p > 0:
        probs = activation(it, "dropout", probs, {"p": p}, [])
    return it.matmul(probs, v)


def pool(it: Interpreter, x: Tensor, d: int, k: Any, s: Any, p: Any, dil: Any, is_max: bool, ceil: bool) -> Any:
    ks, ss, ps, ds = catalog.tup(k, d), catalog.tup(s if s is not None else k, d), catalog.tup(p, d), catalog.tup(dil, d)
    if not all(isinstance(v, int) for v in (*ks, *ss, *ps, *ds)):
        return UNKNOWN
    spatial = x.shape[-d:]
    out_sp = tuple(catalog.pool_out(n, kk, st, pp, dd, ceil) for n, kk, st, pp, dd in zip(spatial, ks, ss, ps, ds, strict=False))
    shape = (*x.shape[:-d], *out_sp)
    out = Tensor(shape, x.dtype)
    saved = [x, Tensor(shape, "int64")] if is_max else [x]
    return it.record(out, [x], saved)


def adaptive_pool(it: Interpreter, x: Tensor, d: int, size: Any, is_max: bool) -> Any:
    sizes = catalog.tup(size, d)
    sizes = tuple(x.shape[-d + i] if s is None else s for i, s in enumerate(sizes))
    if not all(isinstance(v, int) for v in sizes):
        return UNKNOWN
    shape = (*x.shape[:-d], *sizes)
    if not is_max and all(s == 1 for s in sizes):
        return it.record(Tensor(shape, x.dtype), [x], [])  # lowered to mean(): saves nothing
    saved = [x, Tensor(shape, "int64")] if is_max else [x]
    return it.record(Tensor(shape, x.dtype), [x], saved)


def interpolate(it: Interpreter, x: Tensor, size: Any, scale: Any) -> Any:
    n = len(x.shape) - 2
    if size is not None:
        sizes = catalog.tup(size, n)
    elif scale is not None:
        sizes = tuple(int(dim * f) for dim, f in zip(x.shape[2:], catalog.tup(scale, n), strict=False))
    else:
        return UNKNOWN
    return it.record(Tensor((*x.shape[:2], *sizes), x.dtype), [x], [])


# ---- methods -------------------------------------------------------------------------------------
def call_method(it: Interpreter, obj: Any, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    if isinstance(obj, ParamValue):
        obj = it.param_tensor(obj)
    if isinstance(obj, Tensor):
        return tensor_method(it, obj, name, args, kwargs, node)
    if isinstance(obj, Module):
        return module_method(it, obj, name, args, kwargs, node)
    if isinstance(obj, Obj) and obj.type == "shape":
        if name == "numel":
            return math.prod(obj.attrs["dims"])
        return UNKNOWN
    if isinstance(obj, Obj) and obj.type == "super":
        me = obj.attrs.get("self")
        base = container_base(me) if name == "__init__" and isinstance(me, Module) else None
        if base == "Sequential" and isinstance(me, Module):
            # `class MLPBlock(nn.Sequential): super().__init__(*layers)`: its layers are its children, run in order
            mods = [a for a in args if isinstance(a, Module)]
            me.children.update({str(i): m for i, m in enumerate(mods)})
        elif base is not None and isinstance(me, Module):
            # `class TransformerModel(nn.Transformer)`: what the torch.nn base builds is part of the instance
            built = construct(it, base, args, kwargs, node, me.line, me.col)
            if isinstance(built, Module):
                me.params.update(built.params)
                me.buffers.update(built.buffers)
                me.children.update(built.children)
                if built.args.get("incomplete"):
                    me.attrs["incomplete"] = built.args["incomplete"]
        return None  # super().__init__()
    if isinstance(obj, (list, dict)):
        return container_method(it, obj, name, args, kwargs, node)
    if isinstance(obj, set):
        plain = all(isinstance(a, (set, list, tuple, str, int, float)) for a in args)
        if name in ("add", "discard", "remove") and args and isinstance(args[0], (str, int, float, tuple)):
            getattr(obj, "discard" if name == "remove" else name)(args[0])
            return None
        if name in ("union", "intersection", "difference", "update") and plain:
            return getattr(obj, name)(*args)
        return UNKNOWN
    if isinstance(obj, Optimizer):
        if name == "zero_grad":
            it.zero_grad_seen = True
            stn = kwargs.get("set_to_none", args[0] if args else True)
            it.zero_grad_set_to_none = stn is not False
            it.zero_grad_after_forward = it.recorder is not None
        return None
    if isinstance(obj, Obj) and obj.type == "GradScaler":
        return args[0] if name == "scale" and args else None
    if isinstance(obj, str):
        return configs.str_method(obj, name, args, kwargs)
    if isinstance(obj, Obj) and obj.type == "Trainer" and name == "fit" and args and isinstance(args[0], Module):
        return lightning_fit(it, obj, args[0], args[1:], kwargs, node)
    if isinstance(obj, configs.Parser):
        return configs.parser_method(obj, name, args, kwargs, it.argv)
    if isinstance(obj, Obj) and obj.type == "file" and name in ("read", "readlines"):
        text = configs.read_text(obj.attrs["path"], os.path.dirname(it.model.path), obj.attrs.get("mode", "r"))
        return text.splitlines(keepends=True) if name == "readlines" and isinstance(text, str) else text
    if isinstance(obj, (int, float)) and name in ("bit_length",):
        return UNKNOWN
    return UNKNOWN


def module_method(it: Interpreter, mod: Module, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    if name == "parameters":
        return Obj("parameters", {"module": mod})
    if name == "named_parameters":
        return Obj("items", {"items": mod.named_parameters()})
    if name in ("log", "log_dict", "save_hyperparameters", "print") and mod.cls is not None:
        return None  # a LightningModule's logging: no tensors kept
    if name in ("children", "modules"):
        return list(mod.children.values()) if name == "children" else mod.modules()
    if name in ("named_children", "named_modules"):
        return Obj("items", {"items": list(mod.children.items()) if name == "named_children" else mod.walk()})
    if name in ("to", "cuda", "cpu", "train", "eval", "requires_grad_", "apply", "share_memory", "zero_grad"):
        if name == "to":
            dtype = next((dtype_of(a) for a in [*args, kwargs.get("dtype")] if dtype_of(a)), None)
            if dtype:
                mod.set_dtype(dtype)
        if name == "zero_grad":
            it.zero_grad_seen = True
            it.zero_grad_set_to_none = kwargs.get("set_to_none", True) is not False
            it.zero_grad_after_forward = it.recorder is not None
        return mod
    if name in ("half", "bfloat16", "float", "double"):
        mod.set_dtype({"half": "float16", "bfloat16": "bfloat16", "float": "float32", "double": "float64"}[name])
        return mod
    if name == "register_buffer" and len(args) >= 2:
        t = args[1]
        if isinstance(t, Tensor):
            mod.buffers[str(args[0])] = (t.shape, t.dtype)
        return None
    if name == "register_parameter" and len(args) >= 2 and isinstance(args[1], ParamValue):
        it.setattr(mod, str(args[0]), args[1], node or ast.Pass())
        return None
    if name == "add_module" and len(args) >= 2 and isinstance(args[1], Module):
        mod.children[str(args[0])] = args[1]
        return None
    if name == "append" and args and isinstance(args[0], Module):
        mod.children[str(len(mod.children))] = args[0]
        return mod
    if name == "extend" and args:
        for m in it.iterate(args[0], node) or []:
            if isinstance(m, Module):
                mod.children[str(len(mod.children))] = m
        return mod
    if name == "forward":
        return it.call_module(mod, args, kwargs, node)
    if name in ("children", "modules"):
        return list(mod.children.values()) if name == "children" else mod.modules()
    if name == "items" and mod.type == "ModuleDict":
        return Obj("items", {"items": list(mod.children.items())})
    if name in ("values",) and mod.type == "ModuleDict":
        return list(mod.children.values())
    if name in ("state_dict", "named_parameters", "named_modules", "load_state_dict", "register_forward_hook"):
        return UNKNOWN
    it.problem(f"`{mod.type}.{name}()` is not modelled", node)
    return UNKNOWN


def tensor_method(it: Interpreter, t: Tensor, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    shape = t.shape
    n = len(shape)
    if name in ("size",):
        if args and isinstance(args[0], int):
            return shape[norm_dim(args[0], n)]
        return Obj("shape", {"dims": shape})
    if name in ("dim", "ndimension"):
        return n
    if name in COMPARISONS:  # a mask: no gradient, nothing saved
        other = args[0] if args else None
        mask = broadcast(shape, other.shape) if isinstance(other, Tensor) else shape
        return Tensor(mask, "bool", external=it.forward_depth == 0) if mask is not None else UNKNOWN
    if name == "numel":
        return t.numel
    if name in ("item", "tolist", "backward", "detach", "cpu", "cuda", "to", "float", "half", "bfloat16", "long", "int", "bool",
                "type_as", "clone", "requires_grad_", "numpy", "contiguous", "zero_", "fill_", "normal_", "uniform_", "retain_grad",
                "pin_memory", "astype", "share_memory_"):
        if name == "backward":
            return backward(it, t, node)
        if name == "tolist" and 0 < len(t.shape) <= 2 and math.prod(t.shape) <= 1_000_000:
            # as many (unread) values as the tensor holds: iterating it works, reading a value does not
            return [UNKNOWN] * t.shape[0] if len(t.shape) == 1 else [[UNKNOWN] * t.shape[1] for _ in range(t.shape[0])]
        if name in ("item", "tolist", "numpy"):
            return UNKNOWN
        if name == "detach":
            return Tensor(t.shape, t.dtype, False, t.storage, t.external, t.contiguous)
        if name in ("float", "half", "bfloat16", "long", "int", "bool", "to", "astype"):
            dtype = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "long": "int64", "int": "int32", "bool": "bool"}.get(name)
            if name in ("to", "astype"):
                dtype = next((dtype_of(a) for a in [*args, kwargs.get("dtype")] if dtype_of(a)), None)
            if dtype is None or dtype == t.dtype:
                return t
            out = Tensor(t.shape, dtype, external=t.external)
            return it.record(out, [t], [])
        if name == "contiguous":
            if t.contiguous:
                return t
            return it.record(Tensor(t.shape, t.dtype), [t], [])
        if name == "clone":
            return it.record(Tensor(t.shape, t.dtype), [t], [])
        return t
    if name in ("view", "reshape", "view_as", "reshape_as", "expand", "expand_as", "flatten", "unflatten", "transpose", "permute",
                "unsqueeze", "squeeze", "t", "mT", "repeat", "chunk", "split", "unbind", "narrow", "movedim"):
        return it.tensor_view(t, name, *args, **kwargs)
    if name in ("masked_fill", "masked_fill_"):
        mask = args[0] if args else None
        if name.endswith("_") and not t.requires_grad:
            return t
        return it.record(Tensor(t.shape, t.dtype), [t], [mask] if isinstance(mask, Tensor) else [])
    if name in ("sum", "mean", "amax", "max", "min", "var", "std", "logsumexp", "norm", "argmax", "prod", "all", "any"):
        dim = kwargs.get("dim", args[0] if args else None)
        keep = kwargs.get("keepdim", args[1] if len(args) > 1 and isinstance(args[1], bool) else False)
        if dim is None:
            out_shape: tuple[int, ...] = ()
        else:
            dims = {norm_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else [dim]) if isinstance(d, int)}
            out_shape = tuple((1 if keep else None) if i in dims else s for i, s in enumerate(shape))  # type: ignore[misc]
            out_shape = tuple(s for s in out_shape if s is not None)
        dtype = "int64" if name == "argmax" else t.dtype
        saved = [t] if name in ("var", "std", "norm", "logsumexp", "prod") else []
        out = Tensor(out_shape, dtype)
        if name in ("max", "min") and dim is not None:
            res = it.record(out, [t], [Tensor(out_shape, "int64")])
            return (res, Tensor(out_shape, "int64"))
        if name in ("amax", "max", "min"):
            saved = [t, out]
        return it.record(out, [t], saved)
    if name in ("softmax", "log_softmax", "relu", "sigmoid", "tanh", "exp", "sqrt", "rsqrt", "abs", "log", "pow", "sin", "cos"):
        if name == "pow":
            return it.tensor_binop(ast.Pow(), t, args[0] if args else 2, False)
        return activation(it, name, t, kwargs, [])
    if name in ("add", "sub", "mul", "div", "add_", "mul_", "sub_", "div_"):
        op = {"add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div()}[name.rstrip("_")]
        return it.tensor_binop(op, t, args[0] if args else UNKNOWN, name.endswith("_"))
    if name in ("matmul", "mm", "bmm"):
        return it.matmul(t, args[0]) if args else UNKNOWN
    if name in ("clamp", "clamp_", "clip", "neg", "round", "floor", "sign", "square", "erf", "roll", "tril", "triu", "tril_", "triu_"):
        return it.elementwise([t], shape, name, [t] if name in ("clamp", "clip", "square") else [])
    if name in ("gather", "index_select", "repeat_interleave", "topk"):
        it.problem(f"tensor.{name}() shape is not modelled", node)
        return UNKNOWN
    if name in ("new_zeros", "new_ones", "new_empty", "new_full"):
        new_dims = ints(args[:1] if name == "new_full" else args)
        return Tensor(new_dims, t.dtype) if new_dims is not None else UNKNOWN
    it.problem(f"tensor.{name}() is not modelled", node)
    return Unknown(f"tensor.{name}()")


def backward(it: Interpreter, loss_t: Tensor, node: ast.AST | None) -> None:
    rec = it.recorder
    if rec is None:
        it.problem("backward() on a loss no forward was seen for", node)
        return None
    it.step_records.append(StepRecord(rec, loss_t, getattr(node, "lineno", 1) - 1, rec.autocast, rec.batch,
                                      it.held_outputs(rec, loss_t)))
    it.recorder = None
    return None


def _bind_forward(fn: Function) -> Function:
    return fn


# ---- catalog forward -------------------------------------------------------------------------------
def catalog_forward(it: Interpreter, mod: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    kind = mod.type
    x = args[0] if args else kwargs.get("input", kwargs.get("x", kwargs.get("src", kwargs.get("query"))))
    if kind in ("Sequential",):
        out = x
        for child in mod.children.values():
            out = it.call_module(child, [out], {}, node)
        return out
    if kind in catalog.LOSSES:
        target = args[1] if len(args) > 1 else kwargs.get("target")
        name = {"CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss", "MSELoss": "mse_loss", "L1Loss": "l1_loss",
                "SmoothL1Loss": "smooth_l1_loss", "HuberLoss": "huber_loss", "BCELoss": "binary_cross_entropy",
                "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div"}[kind]
        return loss(it, name, x, target, {})
    if isinstance(x, ParamValue):
        x = it.param_tensor(x)
    if not isinstance(x, Tensor):
        it.problem(f"input of {kind}{f' `{mod.name}`' if mod.name else ''} is not a known tensor", node)
        return UNKNOWN
    a = mod.args
    if a.get("incomplete") and (it.checker is not None or kind != "Sequential"):
        return UNKNOWN  # its output shape would be a guess (the layer is reported as unknown where it is built)
    if it.checker is not None:
        if not it.checker.layer(mod, x, args, kwargs):
            it.problem(f"{kind} `{mod.name}` does not take a tensor of shape {x.shape}", node)
            return UNKNOWN  # torch raises here: nothing after it is checked
    if kind == "LazyLinear" and "weight" not in mod.params and isinstance(a.get("out_features"), int) and x.shape:
        # a lazy layer takes its in_features from its first input
        mod.params = {"weight": (a["out_features"], x.shape[-1]), **({"bias": (a["out_features"],)} if a.get("bias", True) else {})}
    weights = [it.param_tensor(ParamValue(s, mod, n)) for n, s in mod.params.items()]
    if kind in ("Linear", "NonDynamicallyQuantizableLinear", "LazyLinear"):
        xs, *ws = it.autocast_inputs([x, *weights[:1]])
        xs = cuda_linear_input(it, x, xs, "bias" in mod.params)
        out = Tensor((*x.shape[:-1], mod.params["weight"][0]) if "weight" in mod.params else x.shape, xs.dtype if it.autocast else mod.dtype)
        return it.record(out, [xs, *ws], [xs, *ws], params=mod)
    if kind == "Bilinear":
        x2 = args[1] if len(args) > 1 else None
        out = Tensor((*x.shape[:-1], mod.params["weight"][0]), x.dtype)
        return it.record(out, [x, *( [x2] if isinstance(x2, Tensor) else [])], [x, *([x2] if isinstance(x2, Tensor) else [])], params=mod)
    if kind.startswith(("Conv1d", "Conv2d", "Conv3d", "ConvTranspose")):
        d = int(kind[-2])
        w = mod.params.get("weight")
        if w is None:
            return UNKNOWN
        ks, ss, ds = catalog.tup(a["kernel_size"], d), catalog.tup(a["stride"], d), catalog.tup(a["dilation"], d)
        pad = a["padding"]
        spatial = x.shape[-d:]
        if pad == "same":
            out_sp = spatial
        elif pad == "valid":
            out_sp = tuple(catalog.conv_out(n, k, s, 0, dd) for n, k, s, dd in zip(spatial, ks, ss, ds, strict=False))
        elif kind.startswith("ConvTranspose"):
            ps, ops_ = catalog.tup(pad, d), catalog.tup(a.get("output_padding", 0), d)
            out_sp = tuple(catalog.conv_transpose_out(n, k, s, p, dd, o) for n, k, s, p, dd, o in zip(spatial, ks, ss, ps, ds, ops_, strict=False))
        else:
            ps = catalog.tup(pad, d)
            out_sp = tuple(catalog.conv_out(n, k, s, p, dd) for n, k, s, p, dd in zip(spatial, ks, ss, ps, ds, strict=False))
        cout = a["out_channels"]
        xs, *ws = it.autocast_inputs([x, *weights[:1]])
        out = Tensor((*x.shape[:-d - 1], cout, *out_sp), xs.dtype if it.autocast else mod.dtype)
        fwd_extra = bwd_extra = 0
        if it.device == "cpu" and cpu_conv_uses_onednn(xs, ks, ss, ds, a.get("groups", 1)):
            # oneDNN (the CPU's default convolution) works on reordered copies: forward holds a copy of
            # the input next to its own output before copying that out (out + max(in, out) live);
            # backward reorders grad_output and the input again next to grad_input (in + out extra)
            fwd_extra = max(xs.nbytes, out.nbytes)
            bwd_extra = xs.nbytes + out.nbytes
        elif it.device == "cuda":
            fwd_extra = bwd_extra = cudnn_conv_workspace(xs, out, ws[0] if ws else None, d)
        return it.record(out, [xs, *ws], [xs, *ws], params=mod, extra_transient=fwd_extra, backward_transient=bwd_extra)
    if kind.startswith("BatchNorm"):
        return norm(it, "batch_norm", x, weights, {}, mod)
    if kind == "LayerNorm":
        return norm(it, "layer_norm", x, weights, {}, mod)
    if kind == "RMSNorm":
        return norm(it, "rms_norm", x, weights, {}, mod)
    if kind == "GroupNorm":
        return norm(it, "group_norm", x, weights, {}, mod, n_groups=a.get("num_groups", 1))
    if kind.startswith("InstanceNorm"):
        return norm(it, "group_norm", x, weights, {}, mod, n_groups=x.shape[1] if len(x.shape) > 1 else 1)
    if kind in ("Embedding", "EmbeddingBag"):
        dim = mod.params["weight"][1]
        shape = (*x.shape, dim) if kind == "Embedding" else (x.shape[0], dim)
        return it.record(Tensor(shape, mod.dtype), [x], [x], params=mod)
    if kind in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        return activation(it, "dropout", x, {"p": a.get("p", 0.5)}, [])
    if kind in ACTIVATION_LAYERS:
        return activation(it, ACTIVATION_LAYERS[kind], x, {"inplace": a.get("inplace", False)}, [])
    if kind in ("Softmax", "LogSoftmax"):
        return activation(it, "softmax" if kind == "Softmax" else "log_softmax", x, {}, [])
    if kind in ("Identity",):
        return x
    if kind in ("Flatten",):
        return it.tensor_view(x, "flatten", a.get("start_dim", 1), a.get("end_dim", -1))
    if kind == "Unflatten":
        return it.tensor_view(x, "unflatten", a.get("dim"), a.get("unflattened_size"))
    if kind.startswith(("MaxPool", "AvgPool")):
        d = int(kind[-2])
        return pool(it, x, d, a["kernel_size"], a.get("stride") or a["kernel_size"], a.get("padding", 0), a.get("dilation", 1),
                    kind.startswith("Max"), bool(a.get("ceil_mode")))
    if kind.startswith(("AdaptiveAvgPool", "AdaptiveMaxPool")):
        return adaptive_pool(it, x, int(kind[-2]), a["output_size"], "Max" in kind)
    if kind in ("Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d"):
        return interpolate(it, x, a.get("size"), a.get("scale_factor"))
    if kind == "Rearrange":
        moved = reshape.rearrange(x.shape, a.get("pattern"), a.get("sizes", {}))
        return it.elementwise([x], moved, "rearrange") if moved is not None else _unreadable(it, mod, node)
    if kind in ("PixelShuffle", "PixelUnshuffle"):
        factor = a.get("upscale_factor", a.get("downscale_factor"))
        moved = reshape.pixel_shuffle(x.shape, factor, inverse=kind == "PixelUnshuffle")
        return it.elementwise([x], moved, kind.lower()) if moved is not None else _unreadable(it, mod, node)
    if kind in reshape.PAD_LAYERS:
        grown = reshape.padded(x.shape, a.get("padding"), reshape.PAD_LAYERS[kind])
        return it.elementwise([x], grown, "pad") if grown is not None else _unreadable(it, mod, node)
    if kind in ("RNN", "LSTM", "GRU"):
        return rnn(it, mod, x)
    if kind == "MultiheadAttention":
        return mha(it, mod, args, kwargs)
    if kind in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        return transformer_layer(it, mod, x, args, kwargs)
    if kind in ("TransformerEncoder", "TransformerDecoder"):
        out = x
        for layer in mod.children["layers"].children.values():
            out = it.call_module(layer, [out, *args[1:]], kwargs, node)
        if "norm" in mod.children:
            out = it.call_module(mod.children["norm"], [out], {}, node)
        return out
    if kind == "Transformer":
        tgt = args[1] if len(args) > 1 else kwargs.get("tgt")
        memory = it.call_module(mod.children["encoder"], [x], {}, node)
        return it.call_module(mod.children["decoder"], [tgt, memory], {}, node)
    if not a.get("incomplete"):  # an unknown layer was reported where it is built
        it.problem(f"forward of nn.{kind} is not modelled", node)
        a["incomplete"] = f"the forward of nn.{kind} is not modelled"
    return UNKNOWN


COMPARISONS = ("eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or",
               "greater", "less", "equal", "not_equal", "greater_equal", "less_equal")


def einops_call(it: Interpreter, short: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int, col: int) -> Any:
    """einops.rearrange(x, pattern, **sizes) and the einops.layers.torch.Rearrange layer; other einops calls are unknown."""
    if short == "Rearrange" and args and isinstance(args[0], str):
        mod = Module("Rearrange", line, col, catalog=True, args={"pattern": args[0], "sizes": dict(kwargs)})
        mod.file = it.foreign_file()
        return mod
    x = args[0] if args else None
    if short == "rearrange" and isinstance(x, Tensor) and len(args) > 1:
        out = reshape.rearrange(x.shape, args[1], kwargs)
        if out is not None:
            return it.elementwise([x], out, "rearrange")
    if short[:1].isupper():
        return unknown_layer(it, short, node, line, col)  # Reduce, Repeat, EinMix: listed as unknown layers
    it.problem(f"einops.{short}() is not modelled", node)
    return UNKNOWN


def _unreadable(it: Interpreter, mod: Module, node: ast.AST | None) -> Any:
    it.problem(f"{mod.type}{f' `{mod.name}`' if mod.name else ''}: its arguments do not fit a tensor of this shape", node)
    return UNKNOWN


def cudnn_conv_workspace(x: Tensor, out: Tensor, w: Tensor | None, d: int) -> int:
    """The workspace cuDNN asks for in one convolution call (forward, or each backward call), as its
    heuristically chosen engines did on the H200 (torch 2.11, cuDNN 9.19, benchmark mode off; the
    allocator snapshots that `bench/vram/cuda_truth.py --snapshots` writes, read layer by layer): the engines work on NHWC
    copies of the input, the output and the filter, so the workspace is in + out + w bytes, plus 16 to
    147 B. Exact for the forward and grad-input calls of most layers, for example cnn_bn's 64->64 3x3
    layer at batch 64 (fp32: 8536080 B = 4 MiB + 4 MiB + 147456 + 16) and dcgan's 64->32
    ConvTranspose at batch 128 (bf16: 3211411 B = 1 MiB + 2 MiB + 65536 + 147). In 16-bit the copies
    pad the channel counts to a multiple of 8 (tensor-core tiles): dcgan's 32->3 ConvTranspose asked
    for 532627 B at batch 16 and 4202643 B at batch 128 in bf16, that is the output with 8 channels.
    What no static rule predicts: the grad-weight call often asks for more (a split-K buffer of 8x
    the filter, or cnn_bn's 140 MiB at batch 64 in fp32, 17.5x its input, which is 10 MiB at batch 32
    and 560 MiB at batch 256 for the same layer), and some calls take an engine with no workspace."""
    def padded(t: Tensor, channel_dims: tuple[int, ...]) -> int:
        if t.dtype not in ("bfloat16", "float16"):
            return t.nbytes
        shape = list(t.shape)
        for i in channel_dims:
            if -len(shape) <= i < len(shape) and isinstance(shape[i], int):
                shape[i] = -(-shape[i] // 8) * 8
        return math.prod(shape) * ITEMSIZE.get(t.dtype, 4)

    chan = -d - 1  # (N, C, *spatial): the channel dimension
    total = padded(x, (chan,)) + padded(out, (chan,))
    if w is not None:
        total += padded(w, (0, 1))
    return total


def cuda_linear_input(it: Interpreter, x: Tensor, xs: Tensor, bias: bool) -> Tensor:
    """What a linear layer multiplies on CUDA (torch 2.11 at::linear), given its input `x` and its
    autocast cast `xs` (a cast keeps x's strides):
    - a bias and a contiguous input (or a 2-D one) take addmm, which runs cuBLASLt when there is more
      than one row: the step then holds cuBLASLt's own workspace (`Recorder.cublaslt`);
    - a non-contiguous input of 3 or more dimensions takes matmul, which reshapes it into a
      contiguous copy first; mm saves that copy.
    Measured on the H200 (bench/vram/cuda_results*.json and the allocator snapshots of the same runs): the
    1 MiB block that the first Linear's forward allocates right after the 32 MiB cuBLAS workspace, in
    every script with a biased Linear on a contiguous input (mlp, cnn_bn, resnet, gpt, vit, vae,
    gru_seq2seq's bridge, recommender, audio_conv1d) and never in lstm_lm, whose only Linear reads the
    batch_first LSTM output (a transposed view): there the forward instead allocates a 16x35x256 fp32
    copy (573440 B at batch 16) that is freed in backward right after the Linear's."""
    if it.device != "cuda":
        return xs
    if not x.contiguous and len(x.shape) >= 3:
        return it.record(Tensor(xs.shape, xs.dtype), [xs], [])
    rows = math.prod(x.shape[:-1]) if len(x.shape) >= 2 else 1
    if bias and rows > 1 and it.recorder is not None:
        it.recorder.cublaslt = True
    return xs


def cpu_conv_uses_onednn(x: Tensor, ks: tuple[Any, ...], ss: tuple[Any, ...], ds: tuple[Any, ...], groups: Any) -> bool:
    """Whether torch's CPU convolution takes the oneDNN (mkldnn) path rather than the native one.

    torch 2.x (ConvParams::use_mkldnn): bf16/fp16 inputs go to oneDNN on CPUs with AVX-512 BF16/FP16
    (assumed); fp32 goes to oneDNN unless the kernel is 1x1 with stride 1 and no dilation, the batch is
    below 16 and torch runs single-threaded (the measurement's setting), or the problem is tiny
    (batch 1, groups 1, kernel at most 3x3 and at most 20480 input elements)."""
    if x.dtype in ("bfloat16", "float16"):
        return True
    if x.dtype != "float32":
        return False
    batch = x.shape[0] if len(x.shape) > len(ks) + 1 else 1
    pointwise = all(k == 1 for k in ks) and all(s == 1 for s in ss) and all(dd == 1 for dd in ds)
    if pointwise and batch < 16:
        return False
    return bool((isinstance(groups, int) and groups > 1) or all(isinstance(k, int) and k > 3 for k in ks) or batch > 1 or x.numel > 20480)


# calibrated on torch 2.13's CPU autograd graph (see bench/vram): bytes saved per step, per layer
# and direction, in units of batch*hidden elements
# (LSTM: the oneDNN workspace of aten::lstm, 16.1 B*H per step; GRU: the composite cells, 7.5)
RNN_SAVED_PER_STEP = {"LSTM": 16.1, "GRU": 7.5, "RNN": 2.0}
# in bytes per batch*hidden per step, when the LSTM runs in bf16/fp16 (CPU autocast: oneDNN's
# mkldnn_rnn_layer keeps part of its workspace in float32, so it is not half the float32 one;
# measured on torch 2.13: 45.0 B against 64.4 B in float32)
RNN_LOWP_BYTES_PER_STEP = {"LSTM": 45.0}
# CUDA runs RNNs through cuDNN, whose "reserve space" is what autograd keeps for backward: measured on
# an H200 (torch 2.11, bench/vram/cuda_results*.json) as 22.0 B (LSTM) and 24.0 B (GRU) per batch*hidden
# per step, per layer and direction, in float32, and exactly half that under bf16 autocast. It holds
# the intermediate layers' outputs too. (Vanilla RNN was not measured: it keeps the CPU figure.)
CUDNN_RESERVE_BYTES_PER_STEP = {"LSTM": 22.0, "GRU": 24.0}
CUDNN_RNN_WORKSPACE = 16 * 2**20


def rnn(it: Interpreter, mod: Module, x: Tensor) -> Any:
    a = mod.args
    batch_first = bool(a.get("batch_first"))
    if len(x.shape) != 3:
        it.problem("RNN input is not 3-D", None)
        return UNKNOWN
    t_len, b = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    h = a["hidden_size"]
    proj = a.get("proj_size", 0) or 0
    dirs = 2 if a.get("bidirectional") else 1
    layers = a["num_layers"]
    out_h = (proj or h) * dirs
    weights = [it.param_tensor(ParamValue(s, mod, n)) for n, s in mod.params.items()]
    # under autocast the cells' matmuls run on casts of the input and the weights (saved), and the
    # per-step tensors they save are in the autocast dtype; the composite cells (GRU, RNN) also save
    # a cast of the hidden state each step
    xs, *ws = it.autocast_inputs([x, *weights])
    dtype = xs.dtype
    itemsize = ITEMSIZE.get(dtype, 4)
    per_step = (RNN_SAVED_PER_STEP[mod.type] + (1.0 if it.autocast and x.dtype == "float32" else 0.0)) * itemsize
    if itemsize == 2 and mod.type in RNN_LOWP_BYTES_PER_STEP:
        per_step = RNN_LOWP_BYTES_PER_STEP[mod.type]
    cudnn = it.device == "cuda" and mod.type in CUDNN_RESERVE_BYTES_PER_STEP
    if cudnn:
        per_step = CUDNN_RESERVE_BYTES_PER_STEP[mod.type] * itemsize / 4
    saved_bytes = int(per_step * b * h * t_len * layers * dirs)
    inner = Tensor((saved_bytes // itemsize,), dtype)
    layer_outputs = [] if cudnn else [Tensor((t_len, b, out_h), dtype) for _ in range(layers - 1)]
    out = Tensor((b, t_len, out_h) if batch_first else (t_len, b, out_h), dtype)
    # cuDNN's workspace is live while the forward and the backward kernels run (not saved). Only a floor is
    # modelled: on the H200 it is exactly linear in the batch per layer configuration, but its coefficients
    # do not follow from the shapes (GRU bi T=30 H=128: 17367296 + 391176*B bytes; GRU T=25 H=128:
    # 8683776 + 246280*B; 2-layer LSTM T=35 H=256: 20447488 + 217608*B; bf16 halves the slope), see
    # docs/vram-accuracy.md; bench/vram/cudnn_probe.py is the grid that can separate the terms
    work = CUDNN_RNN_WORKSPACE if cudnn else 0
    saved = [xs, *ws, inner, *layer_outputs]
    if cudnn:
        # cuDNN computes in (T, B, H) order: a batch_first output is the transposed view of that buffer,
        # and _cudnn_rnn's backward saves the output (the H200 snapshots: the GRU/LSTM output block is
        # freed by the autograd thread after the RNN's backward, not when the next layer is done with it)
        out = Tensor(out.shape, dtype, contiguous=not batch_first)
        saved.append(out)
    out = it.record(out, [xs, *ws], saved, params=mod, extra_transient=work, backward_transient=work)
    hn = Tensor((layers * dirs, b, proj or h), dtype, requires_grad=out.requires_grad)
    if mod.type == "LSTM":
        cn = Tensor((layers * dirs, b, h), dtype, requires_grad=out.requires_grad)
        return (out, (hn, cn))
    return (out, hn)


def mha(it: Interpreter, mod: Module, args: list[Any], kwargs: dict[str, Any], need_weights: bool | None = None) -> Any:
    q = args[0] if args else kwargs.get("query")
    k = args[1] if len(args) > 1 else kwargs.get("key", q)
    v = args[2] if len(args) > 2 else kwargs.get("value", k)
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)):
        return UNKNOWN
    a = mod.args
    e, h = a["embed_dim"], a["num_heads"]
    batch_first = bool(a.get("batch_first"))
    if need_weights is None:
        need_weights = kwargs.get("need_weights", True) is not False
    l_q = q.shape[1] if batch_first else q.shape[0]
    l_k = k.shape[1] if batch_first else k.shape[0]
    b = q.shape[0] if batch_first else q.shape[1]
    hd = e // h
    weights = [it.param_tensor(ParamValue(s, mod, n)) for n, s in mod.params.items()]
    if it.device == "cpu" and q is k and k is v and not need_weights:
        return _mha_cpu_self_attention(it, mod, q, weights, b, l_q, e, h, batch_first)
    # input projection: one (3E) linear for self-attention
    xs, *ws = it.autocast_inputs([q, *weights[:1]])
    proj = it.record(Tensor((l_q, b, 3 * e) if q is k else (l_q, b, e), xs.dtype), [xs, *ws], [xs, *ws], params=mod)
    qh = Tensor((b * h, l_q, hd), proj.dtype, requires_grad=proj.requires_grad)
    kh = Tensor((b * h, l_k, hd), proj.dtype, requires_grad=proj.requires_grad)
    vh = Tensor((b * h, l_k, hd), proj.dtype, requires_grad=proj.requires_grad)
    it.record(qh, [proj], [])
    p = a.get("dropout", 0.0) or 0.0
    if need_weights:
        scores = it.matmul(qh, kh.view((b * h, hd, l_k), contiguous=False))
        probs = activation(it, "softmax", scores, {}, [])
        if p:
            probs = activation(it, "dropout", probs, {"p": p}, [])
        ctx = it.matmul(probs, vh)
    else:
        ctx = sdpa(it, [qh, kh, vh], {"dropout_p": p})
    ctx2 = it.record(Tensor((l_q * b, e), ctx.dtype if isinstance(ctx, Tensor) else proj.dtype), [ctx], [])
    out = it.call_module(mod.children["out_proj"], [ctx2], {}, None)
    out = out.view((b, l_q, e) if batch_first else (l_q, b, e)) if isinstance(out, Tensor) else out
    return (out, None)


def _mha_cpu_self_attention(it: Interpreter, mod: Module, x: Tensor, weights: list[Tensor], b: int, length: int, e: int, h: int,
                            batch_first: bool) -> Any:
    """nn.MultiheadAttention self-attention without attention weights, as torch runs it on the CPU
    (F.multi_head_attention_forward, then the math path of scaled_dot_product_attention):
    - batch_first: the input projection gets `query.transpose(0, 1)`, a non-contiguous 3-D tensor
      that linear (through matmul) copies; the copy is what it saves;
    - the (L, B, 3E) projection is made contiguous once; q, k and v are views of that buffer, so
      saving v keeps the whole buffer;
    - the math path scales copies of q and k (saved by their matmul), saves the softmax output,
      the dropout mask and output, and v; bf16/fp16 q, k and v are cast to float32 first."""
    hd = e // h
    xs, *ws = it.autocast_inputs([x, *weights[:1]])
    if batch_first:
        xs = it.record(Tensor(xs.shape, xs.dtype), [xs], [])
    proj = it.record(Tensor((length, b, 3 * e), xs.dtype), [xs, *ws], [xs, *ws], params=mod)
    packed = it.record(Tensor((length, b, 3 * e), proj.dtype), [proj], [])
    # the math path keeps q, k and v in float32 when they are bf16/fp16 (casts; v's cast is saved)
    # and casts its output back
    acc = "float32" if packed.dtype in ("bfloat16", "float16") else packed.dtype
    qs = it.record(Tensor((b * h, length, hd), acc), [packed], [])
    ks = it.record(Tensor((b * h, length, hd), acc), [packed], [])
    scores = it.record(Tensor((b * h, length, length), acc), [qs, ks], [qs, ks])
    probs = activation(it, "softmax", scores, {}, [])
    p = mod.args.get("dropout", 0.0) or 0.0
    if p:
        probs = activation(it, "dropout", probs, {"p": p}, [])
    if acc == packed.dtype:
        v = packed.view((b * h, length, hd), contiguous=False)
    else:
        v = it.record(Tensor((b * h, length, hd), acc), [packed], [])
    ctx = it.record(Tensor((b * h, length, hd), probs.dtype), [probs, v], [probs, v])
    if ctx.dtype != packed.dtype:
        ctx = it.record(Tensor(ctx.shape, packed.dtype), [ctx], [])
    ctx2 = it.record(Tensor((length * b, e), ctx.dtype), [ctx], [])
    out = it.call_module(mod.children["out_proj"], [ctx2], {}, None)
    out = out.view((b, length, e) if batch_first else (length, b, e)) if isinstance(out, Tensor) else out
    return (out, None)


def transformer_layer(it: Interpreter, mod: Module, x: Tensor, args: list[Any], kwargs: dict[str, Any]) -> Any:
    c = mod.children
    norm_first = bool(mod.args.get("norm_first"))
    act = str(mod.args.get("activation", "relu"))
    act = act if act in ("relu", "gelu") else "relu"
    memory = args[1] if len(args) > 1 else kwargs.get("memory")

    def sa(t: Tensor, attn: str, kv: Any = None) -> Any:
        out = mha(it, c[attn], [t, kv if kv is not None else t, kv if kv is not None else t], {}, need_weights=False)[0]
        return it.call_module(c["dropout1" if attn == "self_attn" else "dropout2"], [out], {}, None)

    def ff(t: Tensor) -> Any:
        h1 = it.call_module(c["linear1"], [t], {}, None)
        h1 = activation(it, act, h1, {}, [])
        h1 = it.call_module(c["dropout"], [h1], {}, None)
        h2 = it.call_module(c["linear2"], [h1], {}, None)
        return it.call_module(c["dropout3" if "norm3" in c else "dropout2"], [h2], {}, None)

    add = lambda p, q: it.tensor_binop(ast.Add(), p, q, False)  # noqa: E731
    if norm_first:
        x = add(x, sa(it.call_module(c["norm1"], [x], {}, None), "self_attn"))
        if "multihead_attn" in c:
            x = add(x, sa(it.call_module(c["norm2"], [x], {}, None), "multihead_attn", memory))
            return add(x, ff(it.call_module(c["norm3"], [x], {}, None)))
        return add(x, ff(it.call_module(c["norm2"], [x], {}, None)))
    x = it.call_module(c["norm1"], [add(x, sa(x, "self_attn"))], {}, None)
    if "multihead_attn" in c:
        x = it.call_module(c["norm2"], [add(x, sa(x, "multihead_attn", memory))], {}, None)
        return it.call_module(c["norm3"], [add(x, ff(x))], {}, None)
    return it.call_module(c["norm2"], [add(x, ff(x))], {}, None)


_ = (Loader, Optimizer, Dataset, Transform)
