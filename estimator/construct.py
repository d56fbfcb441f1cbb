"""What constructor calls build: torch.nn layers, optimizers, checkpointed calls, Lightning's Trainer.fit, and the
methods of Python's lists and dicts."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, hf_data
from torch_preflight.estimator.deepspeed_engine import hf_deepspeed
from torch_preflight.estimator.tensors import backward
from torch_preflight.estimator.values import (
    UNKNOWN,
    Function,
    Loader,
    Module,
    Obj,
    Optimizer,
    Tensor,
    Unknown,
    is_unknown,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

LIGHTNING_PRECISION = {"bf16-mixed": "bfloat16", "16-mixed": "float16", "16": "float16", 16: "float16", "bf16": "bfloat16"}


def lightning_fit(it: Interpreter, trainer: Obj, model: Module, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> None:
    """`Trainer(precision=..., accumulate_grad_batches=...).fit(model, loader | datamodule)`: Lightning owns the loop, so
    one step is read from the LightningModule itself: its first batch through `training_step`, backward with the
    gradients cleared to None before it, the optimizer from `configure_optimizers`, under the precision's autocast."""
    from torch_preflight.estimator.values import BoundMethod, MethodRef

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


# TrainingArguments(optim=...): the optimizer the Trainer builds (its state is what matters here)
HF_OPTIMIZERS: dict[str, dict[str, Any]] = {
    "adamw_torch": {"kind": "AdamW"}, "adamw_hf": {"kind": "AdamW"}, "adamw_torch_fused": {"kind": "AdamW", "fused": True},
    "adamw_bnb_8bit": {"kind": "AdamW", "eight_bit": True}, "adamw_8bit": {"kind": "AdamW", "eight_bit": True},
    "paged_adamw_8bit": {"kind": "AdamW", "eight_bit": True}, "sgd": {"kind": "SGD"}, "adagrad": {"kind": "Adagrad"},
    "rmsprop": {"kind": "RMSprop"},
}


def hf_train(it: Interpreter, trainer: Obj, node: ast.AST | None) -> None:
    """`Trainer(model=..., args=TrainingArguments(...), train_dataset=...).train()` of Hugging Face: the step's settings are
    read from the arguments (per_device_train_batch_size, gradient_accumulation_steps, bf16 / fp16, optim,
    gradient_checkpointing); what is not modelled (the batches the Trainer collates from a dataset into keyword
    arguments, checkpointing inside a library model, an optimizer not in the table) is reported as unknown."""
    line = getattr(node, "lineno", 1) - 1
    model, args = trainer.attrs.get("model"), trainer.attrs.get("args")
    if not isinstance(model, Module):
        it.problem("Trainer.train: the model is not known", node)
        return None
    settings = args.attrs if isinstance(args, Obj) and args.type == "TrainingArguments" else {} if args is None else None
    if settings is None:
        it.problem("Trainer.train: its TrainingArguments are not known", node)
        return None
    optim = settings.get("optim", "adamw_torch")
    spec = HF_OPTIMIZERS.get(optim) if isinstance(optim, str) else None
    if spec is None:
        it.problem(f"TrainingArguments(optim={optim!r}) is not modelled", node)
        it.optimizer_unknown = True
    elif not it.optimizers:
        opt = Optimizer(model=model, line=line, **spec)
        opt.weight_decay = settings.get("weight_decay", 0.0) not in (0, 0.0)  # type: ignore[attr-defined]
        it.optimizers.append(opt)
    if settings.get("deepspeed") is not None:  # TrainingArguments(deepspeed="ds_config.json"): DeepSpeed runs the step
        hf_deepspeed(it, model, settings, node)
    for key in ("bf16", "fp16"):
        if settings.get(key) is True and not it.force_autocast and settings.get("deepspeed") is None:
            it.autocast = "bfloat16" if key == "bf16" else "float16"
            it.assume(f"{key}=True: autocast {it.autocast}", line)
        elif is_unknown(settings.get(key)):
            it.problem(f"TrainingArguments {key} is not known", node)
    accumulate = settings.get("gradient_accumulation_steps", 1)
    it.zero_grad_seen = True
    it.zero_grad_set_to_none = not (isinstance(accumulate, int) and accumulate > 1)  # the Trainer clears to None
    if not it.zero_grad_set_to_none:
        it.assume(f"gradient_accumulation_steps={accumulate}: gradients stay allocated between micro-batches", line)
    if settings.get("gradient_checkpointing") is not None and settings.get("gradient_checkpointing") is not False:
        # the Trainer calls model.gradient_checkpointing_enable(): a model that has it (a Hugging Face model) checkpoints
        enable = it.getattr(model, "gradient_checkpointing_enable", node or ast.Pass())
        if settings.get("gradient_checkpointing") is True and not is_unknown(enable):
            it.call(enable, [], {}, node)
            it.assume("gradient_checkpointing=True: model.gradient_checkpointing_enable()", line)
        else:
            it.problem("TrainingArguments gradient_checkpointing=True (the model's checkpointed blocks) is not modelled", node)
    size = settings.get("per_device_train_batch_size", 8)
    if it.batch_override:
        size = it.batch_override
    batch = hf_data.trainer_batch(trainer.attrs.get("train_dataset"), trainer.attrs.get("data_collator"), size) \
        if isinstance(size, int) else Unknown("per_device_train_batch_size")
    if isinstance(batch, Unknown):
        it.problem(f"Trainer.train: the batches of {size if isinstance(size, int) else '?'} it collates from the training "
                   f"dataset ({batch.reason}) are not known", node)
        return None
    it.batch_sizes.append((size, line))
    it.assume(f"batch_size={size}, rows of {next(iter(batch.values())).shape[1]} tokens: {', '.join(batch)}", line)
    saved = it.grad_enabled
    it.grad_enabled = True
    try:
        out = it.call(model, [], dict(batch), node)
        loss = out.get("loss") if isinstance(out, dict) else it.getattr(out, "loss", node or ast.Pass()) if isinstance(out, Obj) \
            else out[0] if isinstance(out, tuple) and out else out
        if isinstance(loss, Tensor):
            backward(it, loss, node)
        else:
            it.problem("Trainer.train: the model's loss is not a known tensor", node)
    finally:
        it.grad_enabled = saved
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
    if isinstance(obj, list) and name == "append" and len(args) == 1:  # an unknown element: the length is still known
        obj.append(args[0])
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
    if kind == "LBFGS":
        history = kwargs.get("history_size", args[5] if len(args) > 5 else 100)
        opt.history = history if isinstance(history, int) else 100
        max_iter = kwargs.get("max_iter", args[2] if len(args) > 2 else 20)
        opt.max_iter = max_iter if isinstance(max_iter, int) else 20
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
