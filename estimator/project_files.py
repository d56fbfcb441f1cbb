"""The project's folders, paths and images as a script's dataset reads them: `os.listdir` of a folder of the project,
`pathlib.Path` (its `glob`, `iterdir`, `name`, `stem`, `suffix`), `PIL.Image.open(path)` of an image (its size and
mode from the file's header, `images.py`: no pixel is decoded), `img.resize`/`convert`/`crop`, and `np.asarray(img)`,
`np.zeros(shape)` and the numpy methods a dataset's preprocessing calls on the arrays (`arr.transpose(2, 0, 1)`,
`arr.copy()`). Arrays are `Tensor`s marked `host` (numpy's memory, not torch's). Nothing runs: a folder is listed, a
header is read; what is not there or not read is `Unread`, naming it.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from torch_preflight.estimator import images
from torch_preflight.estimator.configs import project_path
from torch_preflight.estimator.kernels import dtype_of
from torch_preflight.estimator.values import Obj, Qualified, Tensor, Unknown, Unread

CALLS = ("PIL.Image.open", "os.listdir", "pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath")
OBJ_TYPES = ("image", "path")
NUMPY_CALLS = ("asarray", "array", "ascontiguousarray", "zeros", "ones", "empty", "full")
MAX_ENTRIES = 100_000  # a folder listed with more entries is not read


def fspath(value: Any) -> Any:
    """A path's text (`str(path)`, `os.fspath(path)`); any other value as it is."""
    return value.attrs["path"] if isinstance(value, Obj) and value.type == "path" else value


def path_value(text: str) -> Obj:
    """`pathlib.Path(text)`: its name, stem and suffix are attributes; `glob`, `iterdir`, `exists` are methods."""
    text = os.path.normpath(text)
    name = os.path.basename(text)
    stem, suffix = os.path.splitext(name)
    return Obj("path", {"path": text, "name": name, "stem": stem, "suffix": suffix})


def image_value(size: tuple[int, int], mode: str) -> Obj:
    return Obj("image", {"size": size, "width": size[0], "height": size[1], "mode": mode})


def call(name: str, args: list[Any], kwargs: dict[str, Any], base_dir: str) -> Any:
    """`name(*args, **kwargs)`, one of CALLS."""
    args = [fspath(a) for a in args]
    if name.startswith("pathlib."):
        if args and all(isinstance(a, str) for a in args):
            return path_value(os.path.join(*args))
        return path_value(".") if not args else Unknown("a path computed at run time")
    path = args[0] if args else kwargs.get("fp", kwargs.get("path", "." if name == "os.listdir" else None))
    if isinstance(path, Obj) and path.type == "file":
        path = path.attrs.get("path")
    short = name.rsplit(".", 1)[-1]
    what = f"{short}({path!r})"
    if not isinstance(path, str):
        return Unread(f"{short} of a path computed at run time")
    full = project_path(path, base_dir)
    if name == "os.listdir":
        return listing(full, what)
    try:
        with open(full, "rb") as f:
            header = images.image_header(f)
    except OSError:
        return Unread(f"{what}: not a file of the project")
    if header is None:
        return Unread(f"{what}: an image whose header is not read (PNG, JPEG, GIF and BMP are)")
    return image_value(header[:2], header[2])


def listing(full: str, what: str) -> Any:
    """A folder's entries, sorted (os.listdir's order is the file system's: a dataset's first sample is any of them)."""
    try:
        with os.scandir(full) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) > MAX_ENTRIES:
                    return Unread(f"{what}: a folder of more than {MAX_ENTRIES:,} entries")
    except OSError:
        return Unread(f"{what}: not a folder of the project")
    return sorted(names)


def method(obj: Obj, name: str, args: list[Any], kwargs: dict[str, Any], base_dir: str) -> Any:
    """A method of a path or an image value."""
    if obj.type == "path":
        full = project_path(obj.attrs["path"], base_dir)
        if name in ("glob", "iterdir", "rglob"):
            found = listing(full, f"{obj.attrs['path']!r}.{name}()")
            pattern = args[0] if args else "*"
            if not isinstance(found, list) or not isinstance(pattern, str) or (name == "rglob" or "/" in pattern):
                return found if isinstance(found, Unknown) else Unread(f"{obj.attrs['path']!r}.{name}({pattern!r})")
            return [path_value(os.path.join(obj.attrs["path"], n)) for n in found if fnmatch.fnmatch(n, pattern)]
        probes = {"exists": os.path.exists, "is_file": os.path.isfile, "is_dir": os.path.isdir}
        if name in probes and not args:
            return probes[name](full)
        return Unknown(f"`Path.{name}`")
    size = obj.attrs["size"]
    if name == "resize":
        new = args[0] if args else kwargs.get("size")
        new = tuple(new) if isinstance(new, (tuple, list)) else None
        ok = new is not None and len(new) == 2 and all(isinstance(d, int) and d > 0 for d in new)
        return image_value((new[0], new[1]), obj.attrs["mode"]) if ok and new else Unread("an image's new size")
    if name == "convert":
        mode = args[0] if args else kwargs.get("mode")
        return image_value(size, mode) if isinstance(mode, str) and mode in images.ARRAY else Unread(f"convert({mode!r})")
    if name == "crop":
        box = args[0] if args else kwargs.get("box")
        if isinstance(box, (tuple, list)) and len(box) == 4 and all(isinstance(v, int) for v in box):
            return image_value((box[2] - box[0], box[3] - box[1]), obj.attrs["mode"])
        return Unread("an image's crop box")
    if name in ("copy", "load", "close", "verify"):
        return obj if name == "copy" else None
    return Unknown(f"`Image.{name}`")


def numpy_call(short: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """numpy's array constructors (one of NUMPY_CALLS): of an image, of an array, or of a shape."""
    first = args[0] if args else kwargs.get("shape", kwargs.get("object"))
    wanted = numpy_dtype(kwargs.get("dtype", args[1] if len(args) > 1 and short != "full" else None))
    if short in ("asarray", "array", "ascontiguousarray"):
        if isinstance(first, Obj) and first.type == "image":
            shape = images.array_shape(first.attrs["size"], first.attrs["mode"])
            if shape is None:
                return Unread(f"an image of mode {first.attrs['mode']!r}")
            return Tensor(shape[0], wanted or shape[1], external=True, host=True)
        if isinstance(first, Tensor):
            return Tensor(first.shape, wanted or first.dtype, external=True, host=True)
        return Unknown(f"call `numpy.{short}`")
    shape = (first,) if isinstance(first, int) else tuple(first) if isinstance(first, (tuple, list)) else None
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return Unknown(f"the shape of `numpy.{short}`")
    return Tensor(shape, wanted or "float64", external=True, host=True)


def numpy_dtype(value: Any) -> str | None:
    """A dtype as numpy spells it: `np.int64`, `'uint8'`, `float` (numpy's float is float64, its int int64)."""
    if isinstance(value, Qualified) and value.name in ("builtins.float", "float"):
        return "float64"
    if isinstance(value, Qualified) and value.name in ("builtins.int", "int"):
        return "int64"
    return dtype_of(value)


def numpy_only(t: Tensor, name: str, args: list[Any]) -> bool:
    """A method call only a numpy array makes: `copy()` (torch's is `clone`), `transpose` of a numpy array or with
    other than two axes (torch's swaps two)."""
    return name == "copy" or (name == "transpose" and (t.host or len(args) != 2))


def numpy_method(t: Tensor, name: str, args: list[Any]) -> Any:
    """`arr.copy()` (a new array) and `arr.transpose(axes)` (numpy's: a permutation, not torch's two-axis swap)."""
    if name == "copy":
        return Tensor(t.shape, t.dtype, external=True, host=True)
    axes = tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args) or tuple(range(len(t.shape)))[::-1]
    if sorted(a for a in axes if isinstance(a, int)) != list(range(len(t.shape))):
        return Unknown("the axes of a numpy transpose")
    return t.view(tuple(t.shape[a] for a in axes), contiguous=False)
