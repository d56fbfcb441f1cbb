"""Memory stays flat over 10,000 edits: the document store keeps no per-version state."""

from __future__ import annotations

import gc
import sys

from lsprotocol import types
from torch_preflight.core.config import Config
from torch_preflight.server import convert
from torch_preflight.server.documents import Document

TEXT = (
    "import torch\n\n"
    "def train(model, loader, optimizer):\n"
    "    for x, y in loader:\n"
    "        loss = model(x).sum()\n"
    "        loss.backward()\n"
    "        optimizer.step()\n"
    "        total = 0.0\n"
    "\n\n"
    "def evaluate(model, loader):\n"  # untouched by the edits: its results are carried from version to version
    "    outs = []\n"
    "    for x, y in loader:\n"
    "        outs.append(model(x))\n"
    "    return outs\n"
)
LINE = TEXT.splitlines().index("        total = 0.0")


def type_and_erase(doc: Document, config: Config, version: int) -> None:
    """Type `0` after `total = 0.0`, or erase it again: the file stays valid."""
    col = len(doc.text.splitlines()[LINE])
    end = types.Position(LINE, col)
    start = end if version % 2 == 0 else types.Position(LINE, col - 1)
    text = "0" if version % 2 == 0 else ""
    doc.update([types.TextDocumentContentChangePartial(range=types.Range(start=start, end=end), text=text)], version, convert.UTF16)
    assert [d.code for d in doc.analysis(config).diagnostics] == ["TPF001", "TPF007", "TPF006"]


def test_memory_stays_flat_over_ten_thousand_edits() -> None:
    doc = Document("file:///tmp/flat/train.py", TEXT, 0)
    config = Config()
    for version in range(1, 501):  # warm every cache first
        type_and_erase(doc, config, version)
    assert doc.scoped.rechecked == 1  # evaluate() is carried over: the reused results are in the measurement
    gc.collect()
    before = sys.getallocatedblocks()
    for version in range(501, 10_501):
        type_and_erase(doc, config, version)
    gc.collect()
    grown = sys.getallocatedblocks() - before
    # Keeping anything per version (a result, a text, a parso tree) would add tens of
    # thousands of blocks over 10,000 versions.
    assert grown < 2_000, f"{grown} memory blocks more after 10,000 edits"
    doc.close()
