"""What the shared kernels allocate and save: activations, losses, norms, attention, pooling, interpolation, and the
device rules of convolutions and linear layers (oneDNN on the CPU, cuDNN and cuBLASLt on CUDA)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from torch_preflight.estimator import catalog
from torch_preflight.estimator.values import (
    DTYPE_ALIASES,
    ITEMSIZE,
    UNKNOWN,
    Module,
    Obj,
    Qualified,
    Tensor,
)

if TYPE_CHECKING:
    from torch_preflight.estimator.interp import Interpreter


SAVE_OUTPUT = {"relu", "relu6", "tanh", "sigmoid", "elu", "softmax", "log_softmax", "exp", "hardtanh"}
SAVE_INPUT = {"gelu", "silu", "leaky_relu", "mish", "softplus", "hardswish", "hardsigmoid", "selu", "celu", "sin", "cos", "log", "rsqrt", "sqrt", "abs", "pow"}


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
            saved = [target, Tensor((), "float32")]  # nll_loss's total weight, a scalar
    elif kind == "nll_loss":  # the log-probabilities (log_softmax's output), the target, the total weight
        saved = [pred, *([target, Tensor((), "float32")] if isinstance(target, Tensor) else [])]
    elif kind == "l1_loss":  # (input - target).abs().mean(): abs saves the difference, a tensor of its own
        saved = [Tensor(pred.shape, pred.dtype)]
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
        if it.device == "cpu":  # composite on the CPU (torch 2.13): x * rsqrt(mean(x^2) + eps), then * weight, saves x * rstd
            stats.append(Tensor(x.shape, dtype))
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


def conv(it: Interpreter, x: Tensor, weights: list[Any], d: int, transposed: bool, stride: Any, padding: Any, dilation: Any,
         groups: Any, output_padding: Any = 0, mod: Module | None = None) -> Any:
    """A convolution (nn.ConvNd's forward, F.convNd, F.conv_transposeNd): `weights` is [weight, bias?], the weight
    (C_out, C_in/groups, *k) or, transposed, (C_in, C_out/groups, *k). Saves its input and weight; on the CPU
    oneDNN's reordered copies, on CUDA cuDNN's workspace are live while it runs."""
    w = weights[0] if weights and isinstance(weights[0], Tensor) else None
    if w is None or len(w.shape) != d + 2 or len(x.shape) < d + 1 or not isinstance(groups, int):
        return UNKNOWN
    ks, ss, ds = tuple(w.shape[2:]), catalog.tup(stride, d), catalog.tup(dilation, d)
    spatial = x.shape[-d:]
    if padding == "same":
        out_sp = spatial
    elif padding == "valid":
        out_sp = tuple(catalog.conv_out(n, k, s, 0, dd) for n, k, s, dd in zip(spatial, ks, ss, ds, strict=False))
    elif transposed:
        ps, ops_ = catalog.tup(padding, d), catalog.tup(output_padding, d)
        out_sp = tuple(catalog.conv_transpose_out(n, k, s, p, dd, o) for n, k, s, p, dd, o in zip(spatial, ks, ss, ps, ds, ops_, strict=False))
    else:
        ps = catalog.tup(padding, d)
        out_sp = tuple(catalog.conv_out(n, k, s, p, dd) for n, k, s, p, dd in zip(spatial, ks, ss, ps, ds, strict=False))
    if not all(isinstance(v, int) for v in out_sp):
        return UNKNOWN
    cout = w.shape[1] * groups if transposed else w.shape[0]
    xs, *ws = it.autocast_inputs([x, w])
    out = Tensor((*x.shape[:-d - 1], cout, *out_sp), xs.dtype if it.autocast else (mod.dtype if mod is not None else x.dtype))
    fwd_extra = bwd_extra = 0
    if it.device == "cpu" and cpu_conv_uses_onednn(xs, ks, ss, ds, groups):
        # oneDNN (the CPU's default convolution) works on reordered copies: forward holds a copy of
        # the input next to its own output before copying that out (out + max(in, out) live);
        # backward reorders grad_output and the input again next to grad_input (in + out extra)
        fwd_extra = max(xs.nbytes, out.nbytes)
        bwd_extra = xs.nbytes + out.nbytes
    elif it.device == "cuda":
        fwd_extra = bwd_extra = cudnn_conv_workspace(xs, out, ws[0] if ws else None, d)
    inputs = [xs, *ws, *[b for b in weights[1:2] if isinstance(b, Tensor)]]
    return it.record(out, inputs, [xs, *ws], params=mod, extra_transient=fwd_extra, backward_transient=bwd_extra)


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
