"""What calls do: the registry the interpreter dispatches to (estimator.record.Ops): qualified torch and library calls,
Python's builtins and methods. The semantics live beside it: estimator.tensors (torch.* functions, tensor methods,
backward), estimator.kernels (what the shared kernels save and allocate), estimator.layers (the forward() of torch.nn
layers), estimator.builtins (Python's builtins), estimator.construct (constructors, optimizers, Lightning), and
estimator.library_sources (models of installed libraries, timm.create_model)."""

from __future__ import annotations

import ast
import collections
import math
import os.path
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, configs, datafiles, hf_data, library_sources, project_files, reshape
from torch_preflight.estimator.builtins import after_in_mro, builtin
from torch_preflight.estimator.construct import (
    checkpoint,
    construct,
    container_method,
    hf_train,
    lightning_fit,
    make_optimizer,
    unknown_layer,
)
from torch_preflight.estimator.deepspeed_engine import deepspeed_initialize, engine_method
from torch_preflight.estimator.kernels import dtype_of
from torch_preflight.estimator.layers import catalog_forward
from torch_preflight.estimator.tensors import tensor_method, torch_function
from torch_preflight.estimator.values import (
    ITEMSIZE,
    UNKNOWN,
    BoundMethod,
    ClassValue,
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
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

# the registry the interpreter reads (estimator.record.Ops)
__all__ = ["call_method", "call_qualified", "catalog_forward", "container_base"]


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


def container_base(mod: Module) -> str | None:
    """The torch.nn layer a user class derives from (directly or not): "Sequential", "Transformer", ...; None when it
    derives from nn.Module only."""

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
    from torch_preflight.estimator.values import BoundMethod, ClassValue

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
    keys = tuple(sample) if isinstance(sample, dict) else ()
    items = list(sample.values()) if isinstance(sample, dict) else list(sample) if isinstance(sample, (tuple, list)) else [sample]
    if not items or not all(isinstance(t, Tensor) and all(isinstance(d, int) for d in t.shape) for t in items):
        it.problem(f"the samples of {ds.type} are not known tensors", node)
        return None
    # every tensor it returns has a known shape and dtype: what it could not read inside was values, which a sample's
    # memory does not depend on (a shape that depended on one would be unknown)
    del it.problems[before:]
    it.assume(f"{ds.type} samples: {', '.join('x'.join(map(str, t.shape)) or 'scalar' for t in items)}, as __getitem__(0) builds them",
              getattr(node, "lineno", 1) - 1)
    return Dataset(tuple((t.shape, t.dtype) for t in items), ds.type, guessed=any(t.guessed for t in items), keys=keys)


def numpy_call(it: Interpreter, short: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """numpy's array constructors (`project_files.numpy_call`), and np.memmap of a file of the project: a 1-D array as
    long as the file holds items (nanoGPT's token files)."""
    if short in project_files.NUMPY_CALLS:
        return project_files.numpy_call(short, args, kwargs)
    if short == "memmap" and args and isinstance(args[0], str):
        dtype = dtype_of(kwargs.get("dtype", args[1] if len(args) > 1 else "uint8")) or "uint8"
        path = configs.project_path(args[0], os.path.dirname(it.model.path))
        if kwargs.get("mode", "r+") == "r" and os.path.isfile(path):
            return Tensor((os.path.getsize(path) // ITEMSIZE.get(dtype, 1),), dtype, external=True, host=True)
    return Unknown(f"call `numpy.{short}`")


def data_file(it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], line: int) -> Any:
    value, assumption = datafiles.load(name, args, kwargs, os.path.dirname(it.model.path))
    if assumption:
        it.assume(assumption, line)
    return value


DEFAULT_FACTORIES: dict[str, Any] = {"list": list, "dict": dict, "set": set, "int": int, "float": float, "str": str}


def call_qualified(it: Interpreter, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None, line: int, col: int) -> Any:
    short = name.rsplit(".", 1)[-1]
    if name.startswith(("torch.nn.", "nn.")) and short in catalog.SIGNATURES and not name.startswith("torch.nn.functional"):
        return construct(it, short, args, kwargs, node, line, col)
    if name.startswith("torch.nn.init."):
        return args[0] if args else None  # initialisers fill a parameter in place
    if name == "contextlib.nullcontext":
        return ContextValue("other")
    if name in ("collections.OrderedDict", "typing.OrderedDict"):
        try:
            return dict(*args[:1], **kwargs) if not args or isinstance(args[0], (dict, list)) else UNKNOWN
        except (TypeError, ValueError):  # a list that is not of pairs
            return UNKNOWN
    if name in ("collections.defaultdict", "typing.DefaultDict"):  # `defaultdict(list)`: a missing key gets a new list
        factory = args[0] if args else None
        make = DEFAULT_FACTORIES.get(factory.name) if isinstance(factory, Qualified) else None
        return collections.defaultdict(make) if make is not None or factory is None else UNKNOWN
    if name in library_sources.FACTORIES:
        return library_sources.timm_create_model(it, args, kwargs, node, line, col)
    if name == "functools.partial" and args:  # `norm_layer = partial(nn.LayerNorm, eps=1e-6)`: called later with the rest
        return Obj("partial", {"func": args[0], "args": list(args[1:]), "kwargs": dict(kwargs)})
    if name in datafiles.READERS:  # np.load, np.fromfile, pickle.load of a file of the project
        return data_file(it, name, args, kwargs, line)
    if name in project_files.CALLS:  # os.listdir, pathlib.Path, PIL.Image.open
        return project_files.call(name, args, kwargs, os.path.dirname(it.model.path))
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
        if isinstance(ds, Obj) and ds.type == "Subset":  # a part of a dataset (random_split): its samples
            ds = ds.attrs["dataset"]
        if isinstance(ds, Obj) and not isinstance(ds, Dataset):
            ds = user_dataset(it, ds, node) or ds
        guessed = "collate_fn" in kwargs or (isinstance(ds, Dataset) and ds.guessed) or it.guessing > 0
        return Loader(ds if isinstance(ds, Dataset) else None, bs, line, guessed=guessed, file=it.cur_path, batch_known=known)
    if name in ("torch.utils.data.random_split", "torch.utils.data.dataset.random_split") and len(args) > 1:
        lengths = args[1] if isinstance(args[1], (list, tuple)) else None
        return [Obj("Subset", {"dataset": args[0]}) for _ in lengths] if lengths is not None else UNKNOWN
    if name == "torch.utils.data.TensorDataset":
        sample = tuple((t.shape[1:], t.dtype) for t in args if isinstance(t, Tensor))
        # a tensor whose shape was guessed (torch.from_numpy of an array that is not known) gives a guessed sample
        guessed = it.guessing > 0 or len(sample) != len(args) or any(t.guessed for t in args if isinstance(t, Tensor))
        return Dataset(sample, "TensorDataset", guessed=guessed)
    if name.startswith("torchvision.datasets."):
        shape, classes = DATASETS.get(short, ((3, 224, 224), 1000))
        tf = kwargs.get("transform")
        # the sample shape is known for the fixed-size datasets, or when the transform crops to a fixed size
        square = short in DATASETS and short not in ("ImageFolder", "ImageNet", "FakeData")
        known = square and isinstance(tf, Transform) and tf.exact and tf.to_tensor and (tf.size is None or tf.square_only is False or square)
        if isinstance(tf, Transform) and tf.size:
            shape = (shape[0], *tf.size)
            known = known or (short in ("ImageFolder", "ImageNet") and tf.exact and tf.to_tensor and not tf.square_only)
        if short == "FakeData":  # FakeData(size=1000, image_size=(3, 224, 224), num_classes=10, transform=None)
            size = kwargs.get("image_size", args[1] if len(args) > 1 else (3, 224, 224))
            if isinstance(size, (tuple, list)) and len(size) == 3 and all(isinstance(v, int) for v in size):
                shape = tuple(size) if not (isinstance(tf, Transform) and tf.size) else (size[0], *tf.size)
                known = isinstance(tf, Transform) and tf.exact and tf.to_tensor and not (tf.size and tf.square_only and size[1] != size[2])
            else:
                known = False
        elif len(args) > 4:
            known = False
        it.assume(f"{short} samples are {shape} images", line)
        _ = classes
        why = "" if known else (f"the size of {short}'s images is not known statically ({shape} assumed; pass --input-shape "
                                f"{','.join(map(str, shape))} with the size its transform makes)")
        return Dataset(((shape, "float32"), ((), "int64")), short, guessed=not known or it.guessing > 0, unknown=why)
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
    if name.startswith("transformers.") and name.endswith(".from_pretrained") and "Tokenizer" in name:
        return Obj("tokenizer", {"name": args[0] if args else None})
    if name == "datasets.load_dataset":
        return Obj("hf_dataset", {"columns": Unknown("the rows of the dataset (map them with a tokenizer)")})
    if name in ("transformers.DataCollatorForLanguageModeling", "transformers.data.data_collator.DataCollatorForLanguageModeling"):
        return Obj("lm_collator", {"mlm": kwargs.get("mlm", True)})
    if name == "deepspeed.initialize":
        return deepspeed_initialize(it, args, kwargs, node)
    if name == "deepspeed.add_config_arguments" and args and isinstance(args[0], configs.Parser):
        configs.add_argument(args[0], ["--deepspeed"], {"action": "store_true"})
        configs.add_argument(args[0], ["--deepspeed_config"], {"default": None})
        return args[0]
    if name in ("torch.save", "torch.load"):  # a file the script itself saved loads back as what it saved
        out = configs.saved_file(it.saved_files, name == "torch.save", args, kwargs)
        return data_file(it, name, args, kwargs, line) if isinstance(out, Unknown) else out  # else a file of the project
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
        return configs.os_call(name, [project_files.fspath(a) for a in args], kwargs, os.path.dirname(it.model.path))
    if name in ("torch.nn.parallel.DistributedDataParallel", "torch.nn.DataParallel", "torch.nn.parallel.DataParallel"):
        return args[0] if args else UNKNOWN  # the wrapper holds the model's parameters (its buckets are not modelled)
    if name in ("lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer"):
        return Obj("Trainer", dict(kwargs))
    if name in ("transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments"):
        return Obj("TrainingArguments", {**dict(zip(("output_dir",), args, strict=False)), **kwargs})
    if name in ("transformers.Trainer", "transformers.Seq2SeqTrainer"):
        return Obj("HFTrainer", {**dict(zip(("model", "args", "data_collator", "train_dataset"), args, strict=False)), **kwargs})
    if name in ("omegaconf.OmegaConf.load", "omegaconf.omegaconf.OmegaConf.load"):
        loaded = configs.yaml_file(args[0] if args else kwargs.get("file_"), os.path.dirname(it.model.path))
        if isinstance(loaded, Unknown):
            it.problem(f"{loaded.reason} is not known", node)
        return loaded
    if name in ("omegaconf.OmegaConf.create", "omegaconf.omegaconf.OmegaConf.create") and len(args) == 1 and isinstance(args[0], dict):
        return configs.config_value(args[0], "OmegaConf.create")
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


def call_method(it: Interpreter, obj: Any, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    if isinstance(obj, ParamValue):
        obj = it.param_tensor(obj)
    if isinstance(obj, Tensor) and project_files.numpy_only(obj, name, args):  # a numpy array's own methods
        return project_files.numpy_method(obj, name, args)
    if isinstance(obj, Tensor):
        return tensor_method(it, obj, name, args, kwargs, node)
    if isinstance(obj, Obj) and obj.type in project_files.OBJ_TYPES:  # a path, an image
        return project_files.method(obj, name, args, kwargs, os.path.dirname(it.model.path))
    if isinstance(obj, Module):
        return module_method(it, obj, name, args, kwargs, node)
    if isinstance(obj, Obj) and obj.type == "shape":
        if name == "numel":
            return math.prod(obj.attrs["dims"])
        return UNKNOWN
    if isinstance(obj, Obj) and obj.type == "super":
        me = obj.attrs.get("self")
        method = after_in_mro(me, obj.attrs.get("class"), name)
        if method is not None:  # `super().__init__(...)` of a base class the script (or library) defines
            return it.call_function(method, [me, *args], kwargs)
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
    if isinstance(obj, Obj) and obj.type == "config" and name == "get" and args and isinstance(args[0], str):
        return obj.attrs.get(args[0], args[1] if len(args) > 1 else kwargs.get("default_value"))  # DictConfig.get
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
            it.grads_live = it.grads_live and stn is False
        closure = (args[0] if args else kwargs.get("closure")) if name == "step" else None
        if isinstance(closure, (Function, BoundMethod)):  # `optimizer.step(closure)` (LBFGS): the step runs the closure,
            it.call(closure, [], {}, node)  # whose zero_grad, forward and backward are the step's
            if obj.history and None not in it.loop_counts:  # a known number of steps: LBFGS keeps a pair per
                # iteration after its first, max_iter iterations a step, up to history_size pairs
                obj.history = min(obj.history, max(math.prod(it.loop_counts) * obj.max_iter - 1, 0))
        it.stepped = it.stepped or name == "step"
        return None
    if isinstance(obj, Obj) and obj.type == "GradScaler":
        return args[0] if name == "scale" and args else None
    if isinstance(obj, str):
        return configs.str_method(obj, name, args, kwargs)
    if isinstance(obj, Obj) and obj.type == "hf_dataset" and (name == "map" or name in hf_data.DATASET_SAME):
        if name != "map":
            return obj
        fn = args[0] if args else kwargs.get("function")
        return hf_data.dataset_map(it.call(fn, [Obj("hf_rows")], {}, node))
    if isinstance(obj, Obj) and obj.type == "token_rows" and name == "copy":
        return obj
    if isinstance(obj, Obj) and obj.type == "HFTrainer" and name == "train":
        return hf_train(it, obj, node)
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
            it.grads_live = it.grads_live and not it.zero_grad_set_to_none
            it.zero_grad_after_forward = it.recorder is not None
        return mod
    if name in ("backward", "step") and it.deepspeed is not None:  # a DeepSpeed engine (estimator.construct)
        return engine_method(it, mod, name, args, node)
    if name == "flatten_parameters":  # an RNN's weights made one contiguous chunk again, in place
        return None
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
