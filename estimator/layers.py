"""The forward() of torch.nn layers the catalog models: convolutions, linear, norms, pooling, RNNs, attention and the
transformer layers."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog, reshape
from torch_preflight.estimator.kernels import (
    activation,
    adaptive_pool,
    conv,
    cuda_linear_input,
    interpolate,
    loss,
    norm,
    pool,
    sdpa,
)
from torch_preflight.estimator.values import (
    ITEMSIZE,
    UNKNOWN,
    Module,
    ParamValue,
    Tensor,
    Unread,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter

ACTIVATION_LAYERS = {
    "ReLU": "relu", "ReLU6": "relu6", "Tanh": "tanh", "Sigmoid": "sigmoid", "ELU": "elu", "GELU": "gelu", "SiLU": "silu",
    "LeakyReLU": "leaky_relu", "Mish": "mish", "Softplus": "softplus", "Hardswish": "hardswish", "Hardsigmoid": "hardsigmoid",
    "SELU": "selu", "CELU": "celu", "PReLU": "leaky_relu",
}


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
        why = f" ({x.reason})" if isinstance(x, Unread) else ""
        it.problem(f"input of {kind}{f' `{mod.name}`' if mod.name else ''} is not a known tensor{why}", node)
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
        if "weight" not in mod.params:
            return UNKNOWN
        return conv(it, x, weights, int(kind[-2]), kind.startswith("ConvTranspose"), a["stride"], a["padding"], a["dilation"],
                    a.get("groups", 1), a.get("output_padding", 0), mod)
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
    if kind in ("RNNCell", "LSTMCell", "GRUCell"):
        return rnn_cell(it, mod, x, args[1] if len(args) > 1 else kwargs.get("hx"))
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


def _unreadable(it: Interpreter, mod: Module, node: ast.AST | None) -> Any:
    it.problem(f"{mod.type}{f' `{mod.name}`' if mod.name else ''}: its arguments do not fit a tensor of this shape", node)
    return UNKNOWN


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


def rnn_cell(it: Interpreter, mod: Module, x: Tensor, hx: Any) -> Any:
    """One step of nn.RNNCell / LSTMCell / GRUCell, as torch's CPU composite cells compute it (aten/src/ATen/native/
    RNN.cpp): the matmuls save the input and the hidden state, the gate activations run in place on the gates buffer
    (saved: LSTM i, f, g, o; GRU the reset and update gates), and each cell saves a few hidden-sized products per
    step (LSTM: tanh(c'); GRU: three, the new gate, `h - n` and one more, the count fitted to the measured per-sample
    slope, docs/vram-accuracy.md; RNN: the output, through tanh). The input-side gates are live while the step runs.
    An omitted hidden state is zeros."""
    if len(x.shape) not in (1, 2):
        return _unreadable(it, mod, None)
    lead = x.shape[:-1]
    h = mod.args["hidden_size"]
    gates = {"RNNCell": 1, "LSTMCell": 4, "GRUCell": 3}[mod.type]
    weights = [it.param_tensor(ParamValue(s, mod, n)) for n, s in mod.params.items()]
    xs, *ws = it.autocast_inputs([x, *weights])
    dtype = xs.dtype
    state = hx[0] if mod.type == "LSTMCell" and isinstance(hx, (tuple, list)) and hx else hx
    h0 = state if isinstance(state, Tensor) else Tensor((*lead, h), dtype)
    c0 = hx[1] if mod.type == "LSTMCell" and isinstance(hx, (tuple, list)) and len(hx) > 1 and isinstance(hx[1], Tensor) \
        else Tensor((*lead, h), dtype)
    hidden = [h0, c0] if mod.type == "LSTMCell" else [h0]
    gate_buf = Tensor((*lead, gates * h), dtype)  # linear_hh(hx) + linear_ih(x), the activations in place
    products = {"RNNCell": 0, "LSTMCell": 1, "GRUCell": 3}[mod.type]
    saved = [xs, *hidden, *ws, *([gate_buf] if mod.type != "RNNCell" else []),
             *(Tensor((*lead, h), dtype) for _ in range(products))]
    out = Tensor((*lead, h), dtype)
    if mod.type == "RNNCell":
        saved.append(out)  # tanh saves its result
    # measured against torch 2.13's CPU cells (docs/vram-accuracy.md): within 4% (over) once the gradients of the
    # weights, one per time step, are summed as autograd sums them (timeline.simulate)
    out = it.record(out, [xs, *hidden, *ws], saved, params=mod, extra_transient=Tensor((*lead, gates * h), dtype).nbytes)
    if mod.type == "LSTMCell":
        cy = Tensor((*lead, h), dtype, requires_grad=out.requires_grad)
        return (out, cy)
    return out


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
