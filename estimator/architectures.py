"""A catalog of common architectures from libraries, as source the interpreter reads like the user's own modules.

torchvision's ResNets and ViTs; Hugging Face GPT-2 (`GPT2LMHeadModel`, `AutoModelForCausalLM.from_pretrained("gpt2")`
and `from_config`) with the configuration values of the hub's GPT-2 checkpoints, as transformers runs it with SDPA
attention.

When a script builds `torchvision.models.resnet50(weights=None)` and the library is not read from the environment,
the estimator interprets the bundled source (estimator/sources/) instead: written for this project in the same torch.nn idioms,
with the libraries' layer structure and parameter counts (pinned by tests), never imported. Keys are the library
modules they stand for; `library_source(qualified)` says which one holds a name.
"""

from __future__ import annotations

import functools
from importlib import resources

SOURCE_FILES = {"torchvision.models": "torchvision_models.py.txt", "transformers": "transformers.py.txt"}
ALIASES = {"torchvision.models.resnet": "torchvision.models", "torchvision.models.vision_transformer": "torchvision.models"}


@functools.cache
def source(module: str) -> str:
    """The bundled source standing for library `module` ("" when there is none): estimator/sources/*.py.txt, data files
    of the package, never imported."""
    name = SOURCE_FILES.get(module)
    return (resources.files("torch_preflight.estimator") / "sources" / name).read_text(encoding="utf-8") if name else ""


@functools.lru_cache(maxsize=4096)
def library_source(qualified: str) -> tuple[str, str] | None:
    """(library module, name) when the catalog holds `qualified` (`torchvision.models.resnet50`), else None (asked of
    every call a script makes into a library: torch's `lowering.py` asks 4,330 times of a few hundred names)."""
    module, _, name = qualified.rpartition(".")
    module = ALIASES.get(module, module)
    text = source(module)
    found = any(f"\n{kind} {name}{end}" in text for kind, end in (("def", "("), ("class", "("), ("class", ":")))
    return (module, name) if found else None
