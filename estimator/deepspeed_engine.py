"""DeepSpeed as a training script uses it: `deepspeed.initialize` with its config (a dict, a JSON file of the project,
`--deepspeed_config`), the engine's `backward` and `step`, and Hugging Face's `TrainingArguments(deepspeed=...)`. The
config's ZeRO stage is kept on the interpreter (`it.deepspeed`); the estimate shards by it across `--gpus N`."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import configs
from torch_preflight.estimator.tensors import backward
from torch_preflight.estimator.values import UNKNOWN, Module, Obj, Optimizer, Qualified, Tensor, is_unknown

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


# DeepSpeed's optimizer `type` names (case-insensitive): the torch optimizer whose state it keeps
DEEPSPEED_OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "fusedadam": "Adam", "cpuadam": "Adam", "sgd": "SGD",
                        "adagrad": "Adagrad", "lamb": "Adam", "onebitadam": "Adam", "zerooneadam": "Adam"}


def deepspeed_initialize(it: Interpreter, args: list[Any], kwargs: dict[str, Any], node: ast.AST | None) -> Any:
    """`engine, optimizer, loader, scheduler = deepspeed.initialize(model=..., config=ds_config)`: the engine is the model
    (calling it runs forward, `engine.backward(loss)` and `engine.step()` the step), with the settings of its config
    (a dict, `config="ds_config.json"`, or `args.deepspeed_config` after `deepspeed.add_config_arguments(parser)`): the
    ZeRO stage, 16-bit training with float32 master weights, the micro-batch of `training_data`, accumulation, the
    optimizer. What is not known is reported by name."""
    line = getattr(node, "lineno", 1) - 1
    model = kwargs.get("model", args[1] if len(args) > 1 else None)
    if not isinstance(model, Module):
        it.problem("deepspeed.initialize: the model is not known", node)
        return (UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)
    config = kwargs.get("config", kwargs.get("config_params"))
    namespace = kwargs.get("args", args[0] if args else None)
    if config is None and isinstance(namespace, Obj):
        config = namespace.attrs.get("deepspeed_config")
    data = configs.deepspeed_config(config, os.path.dirname(it.model.path))
    if is_unknown(data):
        it.problem(f"{data.reason} is not known", node)
        return (model, UNKNOWN, UNKNOWN, UNKNOWN)
    settings = configs.deepspeed_settings(data)
    for value in settings.values():
        if is_unknown(value):
            it.problem(f"{value.reason} is not known", node)
    stage, micro, accumulate = settings["stage"], settings["micro_batch"], settings["accumulation"]
    it.deepspeed = {"stage": stage if isinstance(stage, int) else 0, "line": line}
    it.assume(f"DeepSpeed ZeRO stage {stage}" if isinstance(stage, int) else "DeepSpeed", line)
    sixteen = "bfloat16" if settings["bf16"] is True else "float16" if settings["fp16"] is True else None
    if sixteen:  # the engine trains a 16-bit copy; the optimizer keeps float32 master weights and its state in float32
        model.set_dtype(sixteen)
        it.assume(f"DeepSpeed {'bf16' if sixteen == 'bfloat16' else 'fp16'}: parameters and gradients in {sixteen}, "
                  "float32 master weights and optimizer state", line)
    optimizer = kwargs.get("optimizer")
    kind = settings["optimizer"]
    if not any(o.model is model or o.model is None for o in it.optimizers) or optimizer is None:
        if isinstance(kind, str) and kind.lower() in DEEPSPEED_OPTIMIZERS:
            it.optimizers.append(Optimizer(DEEPSPEED_OPTIMIZERS[kind.lower()], model, line=line))
        elif optimizer is None:
            it.problem(f"DeepSpeed optimizer {kind!r} is not modelled" if kind else "DeepSpeed: no optimizer in the config", node)
    opt = next((o for o in it.optimizers if o.model is model or o.model is None), None)
    if opt is not None:
        opt.model = model
        opt.master_weights = sixteen is not None  # type: ignore[attr-defined]
    if isinstance(accumulate, int) and accumulate > 1:
        it.zero_grad_seen, it.zero_grad_set_to_none = True, False
        it.assume(f"gradient_accumulation_steps={accumulate}: gradients stay allocated between micro-batches", line)
    loader: Any = None
    training_data = kwargs.get("training_data")
    if training_data is not None:
        loader = it.call(Qualified("torch.utils.data.DataLoader"), [training_data], {"batch_size": micro}, node, line=line)
    return (model, opt if opt is not None else UNKNOWN, loader, None)


def engine_method(it: Interpreter, mod: Module, name: str, args: list[Any], node: ast.AST | None) -> Any:
    """A DeepSpeed engine's `backward(loss)` (the step's backward) and `step()` (the optimizer's step)."""
    if name == "backward" and args and isinstance(args[0], Tensor):
        return backward(it, args[0], node)
    return None


def hf_deepspeed(it: Interpreter, model: Module, settings: dict[str, Any], node: ast.AST | None) -> None:
    """The Trainer under DeepSpeed (`TrainingArguments(deepspeed=config)`): the config's ZeRO stage, and 16-bit training
    with float32 master weights for bf16 / fp16 (of the arguments: the integration fills the config's "auto" from them)."""
    data = configs.deepspeed_config(settings["deepspeed"], os.path.dirname(it.model.path))
    stage = configs.deepspeed_settings(data)["stage"] if isinstance(data, dict) else data
    if is_unknown(stage):
        it.problem(f"{stage.reason} is not known", node)
        return
    line = getattr(node, "lineno", 1) - 1
    it.deepspeed = {"stage": stage, "line": line}
    it.assume(f"DeepSpeed ZeRO stage {stage}", line)
    sixteen = "bfloat16" if settings.get("bf16") is True else "float16" if settings.get("fp16") is True else None
    if sixteen:
        model.set_dtype(sixteen)
        for opt in it.optimizers:
            opt.master_weights = True  # type: ignore[attr-defined]
        it.assume(f"DeepSpeed {sixteen}: parameters and gradients in {sixteen}, float32 master weights and optimizer state", line)
