"""Values a script loads from data files of the project, read statically: `torch.load`, `np.load`, `np.fromfile` and
`pickle.load` of a file that is there when the estimate runs.

Nothing is unpickled and nothing is imported: torch's zip format (`ARCHIVE/data.pkl` beside the tensors' bytes in
`ARCHIVE/data/N`) and its legacy format (a few pickles, then the storages' bytes), and any pickle, are read by the
symbolic reader (`pickled.py`), and a `.npy` by its header (magic, version, a dict of `descr`, `fortran_order`,
`shape`), so only the part of a file that describes its arrays is read, never their data. What the file holds becomes
the interpreter's values: a tensor is a `Tensor` of its shape and dtype (tensors that share a storage share it), a
numpy array a `Tensor` marked `host` (numpy's memory, which torch's allocator never counts), dicts, lists, tuples
and numbers are themselves, and anything else (an object of the user's class, a dtype this estimate does not model)
is `Unknown`, naming what and where.
"""

from __future__ import annotations

import ast
import os
import struct
import zipfile
from typing import IO, Any

from torch_preflight.estimator import pickled
from torch_preflight.estimator.configs import project_path
from torch_preflight.estimator.values import ITEMSIZE, Obj, Qualified, Storage, Tensor, Unknown, Unread

READERS = ("numpy.load", "numpy.fromfile", "pickle.load")  # and torch.load, of a file the script did not save itself
TORCH_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch's legacy format
STORAGE_DTYPES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
# numpy's type codes (kind and item size): `<f8`, `|u1`, `?`
NUMPY_DTYPES = {
    "f8": "float64", "f4": "float32", "f2": "float16", "i8": "int64", "i4": "int32", "i2": "int16", "i1": "int8",
    "u1": "uint8", "u2": "uint16", "b1": "bool", "?": "bool", "d": "float64", "f": "float32", "e": "float16",
    "q": "int64", "l": "int64", "i": "int32", "h": "int16", "b": "int8", "B": "uint8", "H": "uint16",
}
RECONSTRUCT = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct")
SCALAR = ("numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar")
STRUCT_CODES = {"float64": "d", "float32": "f", "float16": "e", "int64": "q", "int32": "i", "int16": "h", "int8": "b",
                "uint8": "B", "uint16": "H", "bool": "?"}
MAX_HEADER = 1 << 20  # a .npy header longer than this is not read (numpy's own are a few hundred bytes)
MAX_DEPTH = 64  # nesting read into values (a pickle may hold a list that holds itself)


def load(name: str, args: list[Any], kwargs: dict[str, Any], base_dir: str) -> tuple[Any, str | None]:
    """What a data file of the project holds (`read_call`), and the assumption that it was read as it is now."""
    value = read_call(name, args, kwargs, base_dir)
    if isinstance(value, Unknown):
        return value, None
    return value, f"{call_path(name, args, kwargs)[1]} read from the file as it is now: {describe(value)}"


def call_path(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The path a reader's call names (a string, or a file the script opened), and the call as the report writes it."""
    target = args[0] if args else kwargs.get("file", kwargs.get("f"))
    path = target.attrs.get("path") if isinstance(target, Obj) and target.type == "file" else target
    short = name.split(".")[0] + "." + name.rsplit(".", 1)[-1]
    return path, f"{short}({path!r})" if isinstance(path, str) else f"{short} of a file read at run time"


def read_call(name: str, args: list[Any], kwargs: dict[str, Any], base_dir: str) -> Any:
    """What `name(*args, **kwargs)` (one of READERS, or torch.load) returns for a file of the project; Unknown (saying why) for a
    file that is not there or not readable. The reason starts with the call (`torch.load('x.pt'): ...`)."""
    path, what = call_path(name, args, kwargs)
    if not isinstance(path, str):
        return Unread(what)
    full = project_path(path, base_dir)
    if not os.path.isfile(full):
        return Unread(f"{what}: a file read at run time")
    try:
        if name == "numpy.fromfile":
            return fromfile(full, args[1] if len(args) > 1 else kwargs.get("dtype", "float64"), what,
                            args[2] if len(args) > 2 else kwargs.get("count", -1), kwargs.get("offset", 0))
        with open(full, "rb") as f:
            if name == "torch.load":
                return torch_file(f, what)
            if name == "numpy.load":
                return numpy_file(f, what, bool(kwargs.get("allow_pickle", False)))
            return Reader(what).value(pickled.load(f))
    except (OSError, EOFError, pickled.PickleError, zipfile.BadZipFile, ValueError, SyntaxError, struct.error) as e:
        return Unread(f"{what}: {e}")


def describe(value: Any) -> str:
    """What a file held, in a few words, for the assumption that the estimate read it (`a 100x1000 float64 array`)."""
    if isinstance(value, Tensor):
        return f"a {'x'.join(map(str, value.shape)) or 'scalar'} {value.dtype} {'array' if value.host else 'tensor'}"
    if isinstance(value, (dict, list, tuple)):
        items = list(value.values()) if isinstance(value, dict) else list(value)
        arrays = sum(isinstance(v, Tensor) for v in items)
        return f"a {type(value).__name__} of {len(items)} items{f' ({arrays} arrays or tensors)' if arrays else ''}"
    return f"a {type(value).__name__}"


def torch_file(f: IO[bytes], what: str) -> Any:
    """`torch.load`: the zip format's `data.pkl`, or the legacy format's object (its fourth pickle)."""
    if zipfile.is_zipfile(f):
        f.seek(0)
        with zipfile.ZipFile(f) as z:
            pkl = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
            if len(pkl) != 1:
                return Unread(f"{what}: a zip file without torch's data.pkl")
            return Reader(what).value(pickled.load(member(f, z, pkl[0])))
    f.seek(0)
    if pickled.load(f) != TORCH_MAGIC:
        return Unread(f"{what}: not a file torch.save wrote")
    pickled.load(f)  # the protocol version
    pickled.load(f)  # the system's sizes
    return Reader(what).value(pickled.load(f))


def member(f: IO[bytes], z: zipfile.ZipFile, name: str) -> IO[bytes]:
    """A member of the zip file f to read: for a stored one (torch.save stores them), f itself at the member's data, so
    reads and seeks are the file's (zipfile's stream would read through what is seeked over); else zipfile's stream."""
    info = z.getinfo(name)
    if info.compress_type != zipfile.ZIP_STORED:
        return z.open(info)
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {name}")
    f.seek(info.header_offset + 30 + sum(struct.unpack("<HH", local[26:30])))
    return f


def numpy_file(f: IO[bytes], what: str, allow_pickle: bool) -> Any:
    """`np.load`: a `.npy` array, a `.npz` archive (a dict of its arrays by name), or with allow_pickle a pickle."""
    head = f.read(6)
    f.seek(0)
    if head == b"\x93NUMPY":
        return npy_header(f, what)
    if head.startswith(b"PK"):
        with zipfile.ZipFile(f) as z:
            out: dict[str, Any] = {}
            for n in z.namelist():
                with z.open(n) as stream:  # a header is at the start of a compressed member too (savez_compressed)
                    out[n.removesuffix(".npy")] = npy_header(stream, f"{what}[{n!r}]")
            return out
    if allow_pickle:
        return Reader(what).value(pickled.load(f))
    return Unread(f"{what}: not a .npy or .npz file")


def npy_header(f: IO[bytes], what: str) -> Any:
    """A `.npy` file's array from its header: `\\x93NUMPY`, the version, the header's length, a dict literal."""
    magic = f.read(8)
    if len(magic) != 8 or magic[:6] != b"\x93NUMPY" or magic[6] not in (1, 2, 3):
        return Unread(f"{what}: not a .npy file")
    size = struct.unpack("<H" if magic[6] == 1 else "<I", f.read(2 if magic[6] == 1 else 4))[0]
    if size > MAX_HEADER:
        return Unread(f"{what}: a .npy header of {size:,} bytes")
    header = ast.literal_eval(f.read(size).decode("latin-1" if magic[6] < 3 else "utf-8"))
    if not isinstance(header, dict) or not isinstance(header.get("shape"), tuple):
        return Unread(f"{what}: a .npy header without a shape")
    dtype = numpy_dtype(header.get("descr"))
    shape = header["shape"]
    if dtype is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return Unread(f"{what}: an array of dtype {header.get('descr')!r}")
    return Tensor(shape, dtype, external=True, host=True, contiguous=len(shape) < 2 or not header.get("fortran_order"))


def fromfile(full: str, dtype: Any, what: str, count: Any = -1, offset: Any = 0) -> Any:
    """`np.fromfile(path, dtype, count, offset=...)`: a 1-D array of as many items as the file holds after `offset`."""
    name = numpy_dtype(dtype.name.rsplit(".", 1)[-1] if isinstance(dtype, Qualified) else dtype)
    if name is None or not isinstance(count, int) or not isinstance(offset, int):
        return Unread(f"{what}: the dtype {getattr(dtype, 'name', dtype)!r}, count or offset")
    n = max(os.path.getsize(full) - offset, 0) // ITEMSIZE[name]
    return Tensor((n if count < 0 else min(count, n),), name, external=True, host=True)


def numpy_dtype(descr: Any) -> str | None:
    """numpy's dtype string (`<f8`, `|u1`, `float32`, `int64`) as the estimator's dtype name; None if not modelled."""
    if not isinstance(descr, str):
        return None
    code = descr.lstrip("<>|=")
    if descr[:1] == ">" and code not in ("u1", "i1", "b1", "?", "b", "B"):
        return None  # big-endian: the same memory, but rare enough to stay unknown rather than guessed
    return NUMPY_DTYPES.get(code) or (code if code in ITEMSIZE else None)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of `shape`, in items."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


class Reader:
    """The estimator's value of a symbolically read pickle, for the file `what` names."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.storages: dict[Any, Storage] = {}  # a storage's key -> its Storage (tensors that share one share it)
        self.seen: dict[int, Any] = {}  # a Call read once is one value (a pickle refers to an object twice by memo)

    def unknown(self, what: str) -> Unknown:
        return Unread(f"{self.what}: {what} is not read statically")

    def value(self, obj: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            return self.unknown("data nested this deep")
        if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
            return obj
        if isinstance(obj, (list, tuple)):
            items = [self.value(v, depth + 1) for v in obj]
            return items if isinstance(obj, list) else tuple(items)
        if isinstance(obj, (set, frozenset)):
            return {self.value(v, depth + 1) for v in obj}
        if isinstance(obj, dict):
            return {self.value(k, depth + 1): self.value(v, depth + 1) for k, v in obj.items()}
        if isinstance(obj, pickled.Call):
            if id(obj) not in self.seen:
                self.seen[id(obj)] = self.call(obj, depth)
            return self.seen[id(obj)]
        if isinstance(obj, pickled.Skipped):
            return self.unknown(f"a {obj.kind} of {obj.size:,} bytes")
        return self.unknown(f"`{getattr(obj, 'name', type(obj).__name__)}`")

    def call(self, c: pickled.Call, depth: int) -> Any:
        if c.name in ("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor") and len(c.args) >= 4:
            return self.tensor(c.args[0], c.args[1], c.args[2], c.args[3])
        if c.name == "torch._utils._rebuild_parameter" and c.args:
            return self.value(c.args[0], depth + 1)  # a parameter saved whole: its tensor
        if c.name in RECONSTRUCT and isinstance(c.state, tuple) and len(c.state) == 5:
            _, shape, dtype, _, _ = c.state
            name = self.dtype(dtype)
            if name is None or not isinstance(shape, tuple) or not all(isinstance(d, int) for d in shape):
                return self.unknown(f"a numpy array of dtype {getattr(dtype, 'args', dtype)!r}")
            return Tensor(shape, name, external=True, host=True)
        if c.name in SCALAR and len(c.args) == 2 and isinstance(c.args[1], bytes):
            name = self.dtype(c.args[0])
            if name in STRUCT_CODES and struct.calcsize(STRUCT_CODES[name]) == len(c.args[1]):
                return struct.unpack("<" + STRUCT_CODES[name], c.args[1])[0]  # np.int64(50257): the number
            return self.unknown("a numpy scalar")
        return self.unknown(f"`{c.name}(...)`")

    def dtype(self, dtype: Any) -> str | None:
        """`numpy.dtype('f8', False, True)` with a little-endian (or byte-sized) state."""
        if not (isinstance(dtype, pickled.Call) and dtype.name in ("numpy.dtype", "numpy.core.multiarray.dtype") and dtype.args):
            return None
        order = dtype.state[1] if isinstance(dtype.state, tuple) and len(dtype.state) > 1 else "|"
        return numpy_dtype(f"{order}{dtype.args[0]}") if order in ("<", "|", "=") else None

    def tensor(self, storage: Any, offset: Any, size: Any, stride: Any) -> Any:
        """`_rebuild_tensor_v2(storage, offset, size, stride, ...)` with torch.save's persistent id of the storage:
        ('storage', torch.FloatStorage, key, location, numel[, view metadata])."""
        pid = storage.id if isinstance(storage, pickled.Persistent) else None
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], pickled.Global)):
            return self.unknown("a tensor whose storage")
        dtype = STORAGE_DTYPES.get(pid[1].name.rsplit(".", 1)[-1])
        if dtype is None or not isinstance(size, tuple) or not all(isinstance(d, int) for d in (*size, pid[4], offset)):
            return self.unknown(f"a tensor of {pid[1].name}")
        if pid[2] not in self.storages:
            self.storages[pid[2]] = Storage(pid[4] * ITEMSIZE[dtype])
        return Tensor(size, dtype, external=True, storage=self.storages[pid[2]], contiguous=stride == row_major(size))
