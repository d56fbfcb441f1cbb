"""Configuration values the way training scripts write them: argparse, the command line, configurators, strings.

The interpreter calls these for `argparse.ArgumentParser(...)` and its methods, `sys.argv`, `globals()`,
`exec(open(path).read())` (a configurator such as nanoGPT's, read from the project, never run), `vars(ns)`,
`ast.literal_eval` and the pure `str` methods. The script's own command line (`estimate train.py -- --batch-size 64`)
is `argv`; without it, every option has its default, as when the script runs with no arguments.
"""

from __future__ import annotations

import ast
import json
import os.path
import re
from dataclasses import dataclass, field
from typing import Any

from torch_preflight.estimator import yaml_config
from torch_preflight.estimator.values import UNKNOWN, Obj, Qualified, Unknown

# str methods that are pure functions of their (known) arguments
STR_METHODS = {
    "split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "startswith", "endswith", "replace", "join",
    "partition", "rpartition", "isdigit", "isnumeric", "format", "removeprefix", "removesuffix", "count", "find",
    "title", "capitalize", "zfill", "splitlines", "isalpha", "isidentifier",
}
CONVERTERS: dict[str, Any] = {"int": int, "float": float, "str": str, "bool": bool}
MAX_TEXT = 16 * 2**20  # a text file of the project larger than this is not read


class FileText(str):
    """The text of a project file (`open(path).read()`): a string that remembers its file, so that `exec` of it
    (a configurator) reports lines in that file."""

    path: str


def project_path(path: str, base_dir: str) -> str:
    """A relative path as the script would open it: beside the script, else from the folder the estimate runs in."""
    if os.path.isabs(path):
        return path
    beside = os.path.join(base_dir, path)
    return beside if os.path.exists(beside) or not os.path.exists(path) else os.path.abspath(path)


def read_text(path: str, base_dir: str, mode: Any = "r") -> Any:
    """`open(path, mode).read()` of a text file of the project: its content, as the script would read it (the
    estimator reads the user's files, never runs them); unknown for binary modes, missing or huge files."""
    if not isinstance(mode, str) or "b" in mode or any(c in mode for c in "wax+"):
        return UNKNOWN
    full = project_path(path, base_dir)
    try:
        if os.path.getsize(full) > MAX_TEXT:
            return UNKNOWN
        with open(full, encoding="utf-8") as f:
            text = FileText(f.read())
    except (OSError, UnicodeDecodeError):
        return UNKNOWN
    text.path = path
    return text


@dataclass
class Option:
    dest: str
    flags: tuple[str, ...]  # "--batch-size", "-b"; empty for a positional
    default: Any = None
    type: Any = None  # a converter name ("int") or None
    action: str = "store"
    nargs: Any = None
    const: Any = None


@dataclass
class Parser:
    """An argparse.ArgumentParser as data: its options and defaults."""

    options: list[Option] = field(default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)


def _dest(names: list[str], kwargs: dict[str, Any]) -> str:
    if isinstance(kwargs.get("dest"), str):
        return str(kwargs["dest"])
    longs = [n for n in names if n.startswith("--")]
    name = (longs or names)[0]
    return name.lstrip("-").replace("-", "_")


def add_argument(parser: Parser, args: list[Any], kwargs: dict[str, Any]) -> None:
    names = [a for a in args if isinstance(a, str)]
    if not names or len(names) != len(args):
        return
    action = kwargs.get("action", "store")
    action = action if isinstance(action, str) else "store"
    default = kwargs.get("default", None)
    if "default" not in kwargs:
        default = {"store_true": False, "store_false": True}.get(action, None)
    conv = kwargs.get("type")
    conv_name = None if conv is None else conv.name if isinstance(conv, Qualified) else "?"  # "?": the script's own function
    flags = tuple(n for n in names if n.startswith("-"))
    parser.options.append(Option(_dest(names, kwargs), flags, default, conv_name, action, kwargs.get("nargs"), kwargs.get("const")))


def _convert(option: Option, text: str) -> Any:
    fn = CONVERTERS.get(option.type or "str")
    if fn is None:
        return Unknown(f"option {option.flags[0] if option.flags else option.dest} of a type that is not known")
    if fn is bool:
        return text not in ("", "0", "False", "false")
    try:
        return fn(text)
    except ValueError:
        return Unknown(f"option {option.dest}={text!r}")


def parse_args(parser: Parser, argv: list[str] | None) -> tuple[Obj, list[str]]:
    """The Namespace the script would get from `argv` (its defaults when None), and the arguments left over."""
    values: dict[str, Any] = {}
    for option in parser.options:
        default = option.default
        if isinstance(default, str) and option.type in CONVERTERS and option.action == "store":
            default = _convert(option, default)  # argparse converts a string default with `type`
        if not option.flags and option.nargs not in ("?", "*") and default is None:
            default = Unknown(f"positional argument `{option.dest}`")
        values[option.dest] = default
    values.update(parser.defaults)
    rest: list[str] = []
    by_flag = {flag: option for option in parser.options for flag in option.flags}
    positionals = [o for o in parser.options if not o.flags]
    words = list(argv or [])
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        found = by_flag.get(flag)
        i += 1
        if found is None:
            if not word.startswith("-") and positionals:
                positional = positionals.pop(0)
                values[positional.dest] = _convert(positional, word)
            else:
                rest.append(word)
            continue
        option = found
        if option.action in ("store_true", "store_false", "store_const"):
            values[option.dest] = {"store_true": True, "store_false": False}.get(option.action, option.const)
        elif option.action == "count":
            values[option.dest] = (values.get(option.dest) or 0) + 1
        elif option.nargs in ("+", "*") or isinstance(option.nargs, int):
            items = []
            while i < len(words) and not words[i].startswith("-"):
                items.append(_convert(option, words[i]))
                i += 1
            values[option.dest] = items
        else:
            text = inline if eq else (words[i] if i < len(words) else "")
            i += 0 if eq else 1
            values[option.dest] = _convert(option, text)
    return Obj("Namespace", values), rest


def parser_method(parser: Parser, name: str, args: list[Any], kwargs: dict[str, Any], argv: list[str] | None) -> Any:
    if name == "add_argument":
        add_argument(parser, args, kwargs)
        return None
    if name in ("add_argument_group", "add_mutually_exclusive_group"):
        return parser  # a group's options are the parser's
    if name == "set_defaults":
        parser.defaults.update(kwargs)
        return None
    if name == "parse_args":
        given = args[0] if args else kwargs.get("args")
        return parse_args(parser, list(given) if isinstance(given, list) else argv)[0]
    if name == "parse_known_args":
        given = args[0] if args else kwargs.get("args")
        ns, rest = parse_args(parser, list(given) if isinstance(given, list) else argv)
        return (ns, rest)
    return None


def str_method(text: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if name not in STR_METHODS or any(isinstance(v, (Unknown, Obj)) for v in (*args, *kwargs.values())):
        return UNKNOWN
    try:
        result = getattr(text, name)(*args, **kwargs)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError):
        return UNKNOWN
    return list(result) if isinstance(result, tuple) and name not in ("partition", "rpartition") else result


def literal_eval(value: Any) -> Any:
    if not isinstance(value, str):
        return UNKNOWN
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value  # nanoGPT's configurator keeps a string that is not a literal


def os_call(name: str, args: list[Any], kwargs: dict[str, Any], base_dir: str) -> Any:
    """`os.path.join` and friends on known strings; `os.path.exists` looks at the project's files (the estimate reads
    files as the script would from its own folder, never runs it); `os.environ.get(k, default)` is the default, as
    when the script runs with no such variable set (like argparse options without the command line)."""
    if any(isinstance(a, (Unknown, Obj)) for a in args):
        return UNKNOWN
    if name in ("os.environ.get", "os.getenv"):
        return args[1] if len(args) > 1 else kwargs.get("default")
    strs = all(isinstance(a, str) for a in args) and bool(args)
    if not strs:
        return UNKNOWN
    pure: dict[str, Any] = {"os.path.join": os.path.join, "os.path.basename": os.path.basename, "os.path.dirname": os.path.dirname,
            "os.path.splitext": os.path.splitext, "os.path.expanduser": lambda p: p}
    if name in pure:
        result = pure[name](*args)
        return list(result) if isinstance(result, tuple) else result
    probes = {"os.path.exists": os.path.exists, "os.path.isfile": os.path.isfile, "os.path.isdir": os.path.isdir}
    if name in probes and len(args) == 1:
        return probes[name](project_path(args[0], base_dir))
    return UNKNOWN


def config_value(data: Any, where: str) -> Any:
    """YAML data as OmegaConf's DictConfig reads to the script: a mapping is an attribute config (`cfg.model.dim`, and
    `cfg["model"]`), a value the YAML subset does not read is unknown, by its key and file."""
    if isinstance(data, dict):
        return Obj("config", {k: config_value(v, f"{where}: {k}") for k, v in data.items()})
    if isinstance(data, list):
        return [config_value(v, where) for v in data]
    if data is yaml_config.UNKNOWN_SCALAR:
        return Unknown(f"config value `{where}`")
    return data


def _yaml_data(path: str, base_dir: str) -> Any:
    text = read_text(path, base_dir)
    if not isinstance(text, str) or "@package" in text:  # a package directive places the file elsewhere
        return None
    return yaml_config.parse(text)


def yaml_file(path: Any, base_dir: str) -> Any:
    """`OmegaConf.load(path)` of a YAML file of the project."""
    data = _yaml_data(path, base_dir) if isinstance(path, str) else None
    if data is None:
        return Unknown(f"the YAML config {path!r} (missing, or outside the YAML the estimator reads)" if isinstance(path, str)
                       else "a YAML config whose path is not known")
    return config_value(data, path)


def hydra_config(config_path: Any, config_name: Any, base_dir: str, argv: list[str] | None) -> Any:
    """The config `@hydra.main(config_path=..., config_name=...)` passes: the primary YAML file, its defaults list
    (`- group: option` entries, each `config_path/group/option.yaml` under the key `group`) and the command line's
    `key.sub=value` overrides. Anything else Hydra composes (packages, `override`, optional or nested defaults, a
    group's key also set in the primary file) makes the config unknown rather than guessed."""
    if not isinstance(config_name, str) or not (config_path is None or isinstance(config_path, str)):
        return Unknown("the Hydra config (its path or name is not known)")
    folder = config_path or ""  # relative to the script, as read_text opens it
    name = config_name if config_name.endswith(".yaml") else config_name + ".yaml"
    data = _yaml_data(os.path.join(folder, name), base_dir)
    unknown = Unknown(f"the Hydra config {os.path.join(config_path or '', name)} (outside what the estimator composes)")
    if not isinstance(data, dict):
        return unknown
    overrides: dict[str, str] = {}
    for arg in argv or []:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep or arg.startswith(("-", "~")) or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            return unknown if sep or arg.startswith("~") else Unknown(f"the Hydra command line `{arg}`")
        overrides[key] = value
    groups = data.pop("defaults", [])
    if not isinstance(groups, list):
        return unknown
    for entry in groups:
        if entry == "_self_":
            continue
        if not (isinstance(entry, dict) and len(entry) == 1):
            return unknown
        (group, option), = entry.items()
        option = overrides.pop(group, option)
        if not (isinstance(option, str) and re.fullmatch(r"[A-Za-z_][\w-]*", group) and group not in data):
            return unknown
        sub = _yaml_data(os.path.join(folder, group, option + ".yaml"), base_dir)
        if not isinstance(sub, dict):
            return unknown
        data[group] = sub
    for key, value in overrides.items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return unknown
        try:
            node[last] = yaml_config.parse(f"v: {value}")["v"]  # type: ignore[index]
        except (TypeError, KeyError):
            return unknown
    return config_value(data, os.path.join(config_path or "", name))


def parse_supplied(text: str) -> tuple[str, str]:
    """`NAME=VALUE` (`estimate --set`, `set = {NAME = VALUE}` in [tool.torch-preflight]) -> (NAME, VALUE's source).
    NAME is a variable or attribute name the script assigns (`ntokens`, `vocab_size`, `self.train`)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not all(part.isidentifier() for part in name.split(".")) or not value.strip():
        raise ValueError(f"cannot read {text!r}: use NAME=VALUE, e.g. ntokens=33278")
    return name, value.strip()


def supplied_value(text: str) -> Any:
    """A supplied VALUE: a Python literal (33278, 0.1, True, (3, 224, 224), 'gpt2'), else an expression for the
    interpreter to read (an `ast.expr`: `torch.empty(2088628, dtype=torch.long)` for a tensor of that shape), else the
    text itself as a string (`model_type=gpt2`)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        expr = ast.parse(text, mode="eval").body
    except SyntaxError:
        return text
    return expr if isinstance(expr, (ast.Call, ast.BinOp)) else text


def saved_file(saved: dict[str, Any], save: bool, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`torch.save(obj, f)` records `obj` under f's path (a path, or a file the script opened); `torch.load(f)` of
    a path the script saved returns that object (a model saved whole and loaded back to be evaluated), and
    anything else it loads is not known (a file of the user's, read at run time)."""
    target = args[1] if save and len(args) > 1 else kwargs.get("f") if save else args[0] if args else kwargs.get("f")
    path = target.attrs.get("path") if isinstance(target, Obj) and target.type == "file" else target
    if not isinstance(path, str):
        return None if save else Unknown("torch.load of a file read at run time")
    if save:
        saved[os.path.normpath(path)] = args[0] if args else kwargs.get("obj")
        return None
    return saved.get(os.path.normpath(path), Unknown(f"torch.load({path!r}): a file read at run time"))


def deepspeed_config(value: Any, base_dir: str) -> Any:
    """A DeepSpeed configuration as `deepspeed.initialize(config=...)` takes it: a dict, or the path of its JSON file in
    the project (`--deepspeed_config ds_config.json`); Unknown (with the reason) when it cannot be read."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return Unknown("the DeepSpeed config")
    text = read_text(value, base_dir)
    if not isinstance(text, str):
        return Unknown(f"the DeepSpeed config {value!r} (not a file of the project)")
    try:
        data = json.loads(text)
    except ValueError:
        return Unknown(f"the DeepSpeed config {value!r} (not JSON)")
    return data if isinstance(data, dict) else Unknown(f"the DeepSpeed config {value!r}")


def deepspeed_settings(config: dict[str, Any]) -> dict[str, Any]:
    """What of a DeepSpeed config decides a step's memory: the ZeRO stage, the micro-batch per GPU, the precision (bf16 /
    fp16 train in 16-bit with float32 master weights), gradient accumulation and the optimizer's type. A value that is
    `"auto"` (filled in by the Hugging Face integration) or of another type is Unknown."""
    def enabled(key: str) -> Any:
        section = config.get(key, {})
        value = section.get("enabled", False) if isinstance(section, dict) else Unknown(f"DeepSpeed `{key}`")
        return value if isinstance(value, bool) else Unknown(f"DeepSpeed `{key}.enabled`")

    def integer(value: Any, key: str) -> Any:
        return value if isinstance(value, int) and not isinstance(value, bool) else Unknown(f"DeepSpeed `{key}` = {value!r}")

    zero = config.get("zero_optimization", {})
    optimizer = config.get("optimizer")
    kind = optimizer.get("type") if isinstance(optimizer, dict) else None
    return {
        "stage": integer(zero.get("stage", 0), "zero_optimization.stage") if isinstance(zero, dict) else Unknown("zero_optimization"),
        "micro_batch": integer(config["train_micro_batch_size_per_gpu"], "train_micro_batch_size_per_gpu")
        if "train_micro_batch_size_per_gpu" in config else None,
        "accumulation": integer(config.get("gradient_accumulation_steps", 1), "gradient_accumulation_steps"),
        "bf16": enabled("bf16"), "fp16": enabled("fp16"),
        "optimizer": kind if isinstance(kind, str) or kind is None else Unknown("DeepSpeed `optimizer.type`"),
    }
