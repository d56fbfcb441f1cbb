"""A symbolic pickle reader: the plain data a pickle describes, built without executing anything.

`pickle.load` calls whatever the stream names; this reader never imports, calls or looks up anything. It is a stack
machine over the opcodes (`pickletools`' table of them) that builds tuples, lists, dicts, sets, numbers, strings and
bytes, and records a `GLOBAL`/`STACK_GLOBAL` as a `Global` and its `REDUCE`/`NEWOBJ`/`OBJ` as a `Call` of that
qualified name with its arguments (`BUILD` sets the call's `state`), and a persistent id (`BINPERSID`: how torch.save
refers to its storages) as a `Persistent`. A bytes or string payload longer than `SKIP_OVER` bytes is seeked over and
stands as `Skipped(n)` (an array's data: the estimate needs its shape, never its content), so reading a pickle costs
its opcodes, not its data. Pure: a binary file object in, data out; `PickleError` for what it cannot read.
"""

from __future__ import annotations

import pickletools
import struct
from dataclasses import dataclass, field
from typing import IO, Any

SKIP_OVER = 4096  # longer payloads are not read
CODE2OP = {op.code.encode("latin-1"): op for op in pickletools.opcodes}
# the opcodes with a length-prefixed payload: the length's struct format
PLAIN: dict[str, Any] = {"set": set, "frozenset": frozenset, "bytearray": bytes, "list": list, "tuple": tuple}
PAYLOADS = {"BINSTRING": "<i", "BINBYTES": "<I", "BINUNICODE": "<I", "BINBYTES8": "<Q", "BINUNICODE8": "<Q", "BYTEARRAY8": "<Q"}


class PickleError(ValueError):
    """A stream this reader cannot read (not a pickle, truncated, or an opcode it does not model)."""


@dataclass(eq=False)
class Global:
    """A name the pickle refers to (`GLOBAL 'torch FloatStorage'` is `torch.FloatStorage`): never looked up."""

    name: str


@dataclass(eq=False)
class Call:
    """`name(*args, **kwargs)` as the pickle would have called it, with the state a `BUILD` gives the result and the
    items `APPENDS`/`SETITEMS` add to it; nothing is called."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    items: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class Persistent:
    """A persistent id: what the pickler's `persistent_id` returned for an object kept outside the pickle."""

    id: Any


@dataclass(eq=False)
class Skipped:
    """A payload of `size` bytes that was not read (`kind` "bytes" or "str")."""

    size: int
    kind: str


def _payload(name: str, f: IO[bytes]) -> Any:
    fmt = PAYLOADS[name]
    head = f.read(struct.calcsize(fmt))
    if len(head) != struct.calcsize(fmt):
        raise PickleError("the pickle ends inside a payload's length")
    (n,) = struct.unpack(fmt, head)
    kind = "str" if "UNICODE" in name or name == "BINSTRING" else "bytes"
    if n < 0:
        raise PickleError(f"a negative length in {name}")
    if n > SKIP_OVER:
        f.seek(n, 1)
        return Skipped(n, kind)
    data = f.read(n)
    if len(data) != n:
        raise PickleError("the pickle ends inside a payload")
    if name == "BINSTRING":
        return data.decode("latin-1")
    return data.decode("utf-8", "surrogatepass") if kind == "str" else bytes(data)


def _call(func: Any, args: Any, kwargs: Any = None) -> Any:
    name = func.name if isinstance(func, Global) else "<computed>"
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    if name == "collections.OrderedDict" and not args and not kwargs:
        return {}  # a state_dict: its items follow with SETITEMS
    if name == "_codecs.encode" and len(args) == 2 and isinstance(args[0], str) and args[1] == "latin1":
        return args[0].encode("latin-1")  # how protocol 2 spells bytes
    plain = PLAIN.get(name.split(".", 1)[1]) if name.split(".", 1)[0] in ("builtins", "__builtin__") else None
    if plain is not None and len(args) <= 1 and not kwargs and all(isinstance(a, (list, tuple, bytes)) for a in args):
        return plain(*args)  # how protocols before 4 spell a set, a frozenset, a bytearray
    return Call(name, args, dict(kwargs) if isinstance(kwargs, dict) else {})


def load(f: IO[bytes]) -> Any:
    """The object of the one pickle that starts at f's position (f is left after its STOP)."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list[Any]:
        if not marks:
            raise PickleError("no MARK on the stack")
        k = marks.pop()
        items = stack[k:]
        del stack[k:]
        return items

    def add(target: Any, items: list[Any], pairs: bool) -> None:
        if isinstance(target, Call):
            target.items.extend(zip(items[::2], items[1::2], strict=False) if pairs else items)
        elif pairs and isinstance(target, dict):
            target.update(zip(items[::2], items[1::2], strict=False))
        elif not pairs and isinstance(target, list):
            target.extend(items)
        elif not pairs and isinstance(target, set):
            target.update(items)
        else:
            raise PickleError(f"items added to a {type(target).__name__}")

    try:
        while True:
            code = f.read(1)
            if not code:
                raise PickleError("the pickle ends before its STOP")
            op = CODE2OP.get(code)
            if op is None:
                raise PickleError(f"not a pickle (byte {code!r})")
            name = op.name
            arg: Any = _payload(name, f) if name in PAYLOADS else op.arg.reader(f) if op.arg is not None else None
            if name == "STOP":
                return stack.pop()
            if name in ("PROTO", "FRAME"):
                continue
            if name == "MARK":
                marks.append(len(stack))
            elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
                stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
            elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE", "EMPTY_SET"):
                stack.append({"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_TUPLE": tuple, "EMPTY_SET": set}[name]())
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                if len(stack) < n:
                    raise PickleError(f"{name} on a stack of {len(stack)}")
                stack[-n:] = [tuple(stack[-n:])]
            elif name in ("LIST", "FROZENSET"):
                stack.append(list(pop_mark()) if name == "LIST" else frozenset(pop_mark()))
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2], strict=False)))
            elif name in ("APPEND", "SETITEM"):
                n = 1 if name == "APPEND" else 2
                items = stack[-n:]
                del stack[-n:]
                add(stack[-1], items, pairs=n == 2)
            elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
                items = pop_mark()
                add(stack[-1], items, pairs=name == "SETITEMS")
            elif name == "POP":
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[arg])
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[arg] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name == "GLOBAL":
                module, _, attr = arg.partition(" ")
                stack.append(Global(f"{module}.{attr}"))
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                stack.append(Global(f"{module}.{attr}"))
            elif name in ("REDUCE", "NEWOBJ"):
                args = stack.pop()
                stack.append(_call(stack.pop(), args))
            elif name == "NEWOBJ_EX":
                kwargs, args = stack.pop(), stack.pop()
                stack.append(_call(stack.pop(), args, kwargs))
            elif name == "OBJ":
                cls, *args = pop_mark()
                stack.append(_call(cls, args))
            elif name == "INST":
                module, _, attr = arg.partition(" ")
                stack.append(_call(Global(f"{module}.{attr}"), pop_mark()))
            elif name == "BUILD":
                state = stack.pop()
                if isinstance(stack[-1], Call):
                    stack[-1].state = state  # a dict's state (an OrderedDict's `_metadata`) is not data
            elif name in ("PERSID", "BINPERSID"):
                stack.append(Persistent(arg if name == "PERSID" else stack.pop()))
            elif op.arg is not None and name not in ("EXT1", "EXT2", "EXT4"):
                stack.append(arg)  # a number or a string
            else:
                raise PickleError(f"the opcode {name} is not read")
    except (IndexError, KeyError, TypeError, OverflowError) as e:  # an empty stack, a missing memo entry, an unhashable
        # key, a length past any file
        raise PickleError(f"a malformed pickle ({type(e).__name__})") from e
    except (ValueError, UnicodeDecodeError) as e:
        if isinstance(e, PickleError):
            raise
        raise PickleError(f"a malformed pickle ({e})") from e
