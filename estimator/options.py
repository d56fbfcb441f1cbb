"""Estimate options and the catalog of common GPUs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch_preflight.estimator.scope import CORPUS_BYTES

GIB = 1024**3
GPUS: dict[str, int] = {
    "a100-40gb": 40 * GIB, "a100-80gb": 80 * GIB, "h100-80gb": 80 * GIB, "h100": 80 * GIB, "h200": 141 * 10**9,
    "l4": 24 * GIB, "t4": 16 * GIB, "v100-16gb": 16 * GIB, "v100-32gb": 32 * GIB, "rtx-3090": 24 * GIB, "rtx-4090": 24 * GIB,
    "rtx-3080": 10 * GIB, "rtx-4080": 16 * GIB, "a10g": 24 * GIB, "a10": 24 * GIB, "l40s": 48 * GIB, "a6000": 48 * GIB,
    "mi300x": 192 * GIB,
}
# what nvidia-smi shows on top of max_memory_allocated(): the CUDA context, and the caching allocator's reserve
CUDA_CONTEXT_BYTES = 500 * 1024**2
ALLOCATOR_RESERVE = 0.10
# cuBLAS workspace that torch allocates through the caching allocator, once per (handle, stream): one for the
# thread that runs forward and one for the autograd engine's thread, both live from the first step on (measured on
# an H200 with torch 2.11: 2 x 32 MiB in max_memory_allocated() for any model with a Linear; none for conv-only
# models). Hopper and later use 32 MiB; earlier GPUs torch's default ":4096:2:16:8" (2 x 4 MiB + 8 x 16 KiB).
CUBLAS_WORKSPACE_HOPPER = 32 * 1024**2
CUBLAS_WORKSPACE_OLDER = 2 * 4096 * 1024 + 8 * 16 * 1024
_PRE_HOPPER = ("a100", "v100", "t4", "l4", "a10", "rtx-", "l40", "a6000")


# cuBLASLt (addmm with a bias: Linear on a contiguous input) has its own workspace, CUBLASLT_WORKSPACE_SIZE,
# 1 MiB by default (torch 2.11), allocated by the first such GEMM of the thread that runs forward and kept
# (measured on the H200: one 1 MiB block, never freed, in every script with such a Linear; none in the
# autograd thread, whose GEMMs have no bias epilogue)
CUBLASLT_WORKSPACE = 1024**2


def cublas_workspace(gpu: str | None) -> int:
    name = (gpu or "").strip().lower().replace("_", "-")
    return CUBLAS_WORKSPACE_OLDER if name.startswith(_PRE_HOPPER) else CUBLAS_WORKSPACE_HOPPER


def gpu_memory(name: str) -> int | None:
    return GPUS.get(name.strip().lower().replace("_", "-").replace(" ", "-"))


@dataclass(frozen=True)
class EstimateOptions:
    model: str | None = None  # class name (or variable name) of the model to report
    batch_size: int | None = None
    input_shape: tuple[int, ...] | None = None  # one sample, without the batch dimension
    dtype: str | None = None  # parameter dtype override: float32 | bfloat16 | float16
    optimizer: str | None = None  # override: sgd | sgd-momentum | adam | adamw | rmsprop | adagrad | none
    device: str = "cuda"  # cuda | cpu
    budget_bytes: int | None = None
    gpu: str | None = None
    autocast: str | None = None  # force autocast dtype (used for the bf16 remedy)
    remedies: bool = True
    n_gpus: int = 8  # for the ZeRO/FSDP remedies
    world_size: int | None = None  # the GPUs the job runs on (`--gpus`): what DeepSpeed's ZeRO shards across
    argv: tuple[str, ...] | None = None  # the script's own command-line arguments (`estimate train.py -- --batch-size 64`)
    python: str | None = None  # the environment libraries' models are read from (an interpreter or its folder; default: this one)
    # values the user supplies for what the script assigns and cannot be read statically (`--set ntokens=33278`):
    # (NAME, VALUE's source), see estimator.configs.supplied_value
    values: tuple[tuple[str, str], ...] = ()
    # the most bytes of files longer than FILE_LINES that loops read line by line (a corpus a vocabulary is built from,
    # read compiled: seconds of work); the editor's and `check`'s estimates, run on every change, read none
    corpus_bytes: int = CORPUS_BYTES
    # asked now and then while the estimate runs: true when the caller no longer wants it (the editor's text changed);
    # the estimate then stops and gives [] (estimator.Cancelled)
    stale: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def budget(self) -> int | None:
        if self.budget_bytes is not None:
            return self.budget_bytes
        return gpu_memory(self.gpu) if self.gpu else None
