"""End-to-end tests of the language server over stdio, with pytest-lsp."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import pytest_lsp
from conftest import rule_page
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from torch_preflight.analyze import analyze

HERE = Path(__file__).parent
URI = "file:///tmp/tp_lsp_test/train.py"

TRAIN = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 2048)
        self.fc2 = nn.Linear(2048, 10)


def train(model, loader, optimizer, criterion):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()


def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += model(x).sum().item()
    return total


model = Net()
"""


def caps(pull: bool = False, resolve: bool = False, encodings: list[str] | None = None) -> types.ClientCapabilities:
    td = types.TextDocumentClientCapabilities(
        code_action=types.CodeActionClientCapabilities(
            resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]) if resolve else None
        ),
        diagnostic=types.DiagnosticClientCapabilities() if pull else None,
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
    )
    return types.ClientCapabilities(
        text_document=td,
        workspace=types.WorkspaceClientCapabilities(
            configuration=True
        ),
        general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
    )


CONFIG = ClientServerConfig(server_command=[sys.executable, str(HERE / "fake_server.py")])


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: LanguageClient):
    lsp_client.set_configuration({"debounce": 0}, section="torchPreflight")
    yield
    await lsp_client.shutdown_session()


async def start(client: LanguageClient, text: str = TRAIN, **kw) -> types.InitializeResult:
    result = await client.initialize_session(types.InitializeParams(capabilities=caps(**kw), initialization_options={"debounce": 0}))
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text)))
    return result


async def diagnostics(client: LanguageClient, version: int, uri: str = URI) -> list[types.Diagnostic]:
    for _ in range(200):
        await asyncio.sleep(0.02)
        if uri in client.diagnostics and client.diagnostics[uri] is not None and client._last_version.get(uri) == version:  # type: ignore[attr-defined]
            return list(client.diagnostics[uri])
    raise AssertionError(f"no diagnostics for version {version}")


def track_versions(client: LanguageClient) -> None:
    client._last_version = {}  # type: ignore[attr-defined]

    features = client.protocol.fm.features
    original = features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def publish(params: types.PublishDiagnosticsParams) -> None:
        client._last_version[params.uri] = params.version  # type: ignore[attr-defined]
        original(params)

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = publish


def utf16_offset(text: str, pos: types.Position) -> int:
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: pos.line])
    line = lines[pos.line] if pos.line < len(lines) else ""
    units = 0
    for i, ch in enumerate(line):
        if units >= pos.character:
            return start + i
        units += 2 if ord(ch) > 0xFFFF else 1
    return start + len(line)


def apply(text: str, edit: types.WorkspaceEdit) -> str:
    edits = [e for change in edit.document_changes or [] for e in change.edits]
    # inserts at one position apply in array order: apply the later ones first
    spans = sorted(((utf16_offset(text, e.range.start), i, utf16_offset(text, e.range.end), e.new_text) for i, e in enumerate(edits)), reverse=True)
    for start, _, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


async def actions(client: LanguageClient, line: int, only: list[str] | None = None) -> list[types.CodeAction]:
    rng = types.Range(types.Position(line, 0), types.Position(line, 0))
    got = await client.text_document_code_action_async(
        types.CodeActionParams(types.TextDocumentIdentifier(URI), rng, types.CodeActionContext(diagnostics=[], only=only))
    )
    return [a for a in got or [] if isinstance(a, types.CodeAction)]


@pytest.mark.asyncio
async def test_diagnostics_after_open_and_incremental_edit(client: LanguageClient) -> None:
    track_versions(client)
    result = await start(client)
    assert result.capabilities.diagnostic_provider is None  # push client
    found = await diagnostics(client, 1)
    assert sorted((d.code, d.range.start.line) for d in found) == [("TPF001", 12), ("TPF007", 21)]
    first = next(d for d in found if d.code == "TPF001")
    assert first.source == "torch-preflight"
    assert first.code_description and rule_page(first.code_description.href).name == "TPF001.md"
    assert first.data["code"] == "TPF001"
    # insert zero_grad by an incremental edit: the TPF001 finding goes away
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=URI),
        [types.TextDocumentContentChangePartial(types.Range(types.Position(13, 0), types.Position(13, 0)), "        optimizer.zero_grad()\n")],
    ))
    found = await diagnostics(client, 2)
    assert [d.code for d in found] == ["TPF007"]
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(URI)))
    for _ in range(100):
        await asyncio.sleep(0.02)
        if not client.diagnostics[URI]:
            break
    assert not client.diagnostics[URI]


@pytest.mark.asyncio
async def test_a_large_file_gets_the_cheap_rules_first_then_the_complete_diagnostics_of_the_same_version(client: LanguageClient) -> None:
    # 600 lines: the first analysis of a document this size publishes the local rules' findings
    # (TPF001) before the whole-module rules run (TPF007), both as version 1.
    published: list[types.PublishDiagnosticsParams] = []
    features = client.protocol.fm.features
    original = features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]
    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = lambda params: published.append(params) or original(params)
    text = TRAIN + "".join(f"\n\ndef helper_{i}(x):\n    return x + {i}\n" for i in range(150))
    await start(client, text=text)
    for _ in range(500):
        await asyncio.sleep(0.02)
        if len(published) == 2:
            break
    assert [p.version for p in published] == [1, 1]
    first, second = (sorted((str(d.code), d.range.start.line) for d in p.diagnostics) for p in published)
    assert first == [("TPF001", 12)]
    assert second == [("TPF001", 12), ("TPF007", 21)]
    full = analyze(text, "/tmp/tp_lsp_test/train.py")
    assert second == sorted((d.code, d.span.start.line) for d in full.diagnostics)


@pytest.mark.asyncio
@pytest.mark.parametrize("resolve", [False, True])
async def test_quick_fixes_apply(client: LanguageClient, resolve: bool) -> None:
    track_versions(client)
    await start(client, resolve=resolve)
    await diagnostics(client, 1)
    fixes = [a for a in await actions(client, 12) if "zero_grad" in a.title]
    assert len(fixes) == 1
    action = fixes[0]
    if resolve:
        assert action.edit is None
        action = await client.code_action_resolve_async(action)
    assert action.edit is not None
    fixed = apply(TRAIN, action.edit)
    assert "    for x, y in loader:\n        optimizer.zero_grad()\n        loss = criterion" in fixed
    wrap = next(a for a in await actions(client, 21) if "no_grad" in a.title)
    if resolve:
        wrap = await client.code_action_resolve_async(wrap)
    fixed = apply(TRAIN, wrap.edit)
    assert "    with torch.no_grad():\n        for x, y in loader:\n            total += model(x).sum().item()\n    return total" in fixed
    assert [d.code for d in analyze(fixed, "t.py").diagnostics] == ["TPF001"]


@pytest.mark.asyncio
async def test_no_grad_wrap_with_tabs_and_blank_lines(client: LanguageClient) -> None:
    track_versions(client)
    text = "import torch\n\n\ndef evaluate(model, loader):\n\tmodel.eval()\n\tfor x in loader:\n\n\t\ty = model(x)\n  \n\t\tprint(y)\n\treturn 1\n"
    await start(client, text=text)
    found = await diagnostics(client, 1)
    assert [d.code for d in found] == ["TPF007"]
    wrap = next(a for a in await actions(client, 5) if "no_grad" in a.title)
    fixed = apply(text, wrap.edit)
    assert fixed == ("import torch\n\n\ndef evaluate(model, loader):\n\tmodel.eval()\n\twith torch.no_grad():\n\t\tfor x in loader:\n\n"
                     "\t\t\ty = model(x)\n  \n\t\t\tprint(y)\n\treturn 1\n")


@pytest.mark.asyncio
async def test_fix_all_and_noqa(client: LanguageClient) -> None:
    track_versions(client)
    await start(client)
    await diagnostics(client, 1)
    fix_all = await actions(client, 0, only=["source.fixAll"])
    assert [a.kind for a in fix_all] == ["source.fixAll.torch-preflight"]
    fixed = apply(TRAIN, fix_all[0].edit)
    assert [d.code for d in analyze(fixed, "t.py").diagnostics] == ["TPF001"]  # the unsafe zero_grad fix is not applied
    noqa = next(a for a in await actions(client, 12) if a.title == "Suppress TPF001 on this line")
    suppressed = apply(TRAIN, noqa.edit)
    assert "    for x, y in loader:  # noqa: TPF001\n" in suppressed
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=URI), [types.TextDocumentContentChangeWholeDocument(
            suppressed.replace("# noqa: TPF001", "# noqa: TPF005"))]))
    await diagnostics(client, 2)
    merged = next(a for a in await actions(client, 12) if a.title == "Suppress TPF001 on this line")
    assert "    for x, y in loader:  # noqa: TPF001, TPF005\n" in apply(suppressed.replace("# noqa: TPF001", "# noqa: TPF005"), merged.edit)


@pytest.mark.asyncio
async def test_inlay_hints_and_hover(client: LanguageClient) -> None:
    track_versions(client)
    await start(client)
    await diagnostics(client, 1)
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        types.TextDocumentIdentifier(URI), types.Range(types.Position(0, 0), types.Position(100, 0))))
    labels = {h.position.line: h.label for h in hints}
    assert labels[7] == "  1.6M params · 6.1 MiB"
    assert labels[26].startswith("  peak ≈ ")
    assert hints[0].position.character == len("        self.fc1 = nn.Linear(784, 2048)")
    hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(URI), types.Position(7, 10)))
    assert "**fc1** (Linear)" in hover.contents.value and "| params | 1,607,680 |" in hover.contents.value
    none = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(URI), types.Position(0, 0)))
    assert none is None


@pytest.mark.asyncio
async def test_settings_change_and_bad_values(client: LanguageClient) -> None:
    track_versions(client)
    client.set_configuration({"debounce": 0, "ignore": ["TPF007"], "batchSize": -3, "gpuMemory": "24GiB"}, section="torchPreflight")
    await start(client)
    found = await diagnostics(client, 1)
    assert [d.code for d in found] == ["TPF001"]
    assert any("batchSize" in m.message for m in client.messages)
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        types.TextDocumentIdentifier(URI), types.Range(types.Position(0, 0), types.Position(100, 0))))
    assert any("fits 24.0 GiB" in h.label for h in hints)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"torchPreflight": {"debounce": 0, "inlayHints": {"enabled": False}}}))
    for _ in range(100):
        await asyncio.sleep(0.02)
        if len(client.diagnostics[URI]) == 2:
            break
    assert sorted(d.code for d in client.diagnostics[URI]) == ["TPF001", "TPF007"]
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        types.TextDocumentIdentifier(URI), types.Range(types.Position(0, 0), types.Position(100, 0))))
    assert not hints


@pytest.mark.asyncio
@pytest.mark.parametrize(("encoding", "unit"), [("utf-16", 2), ("utf-8", 4), ("utf-32", 1)])
async def test_position_encodings_with_emoji(client: LanguageClient, encoding: str, unit: int) -> None:
    track_versions(client)
    text = TRAIN.replace("def train(model, loader, optimizer, criterion):\n    for x, y in loader:",
                         "def train(model, loader, optimizer, criterion):\n    s = '😀'; t = [y for y in 'é😀']\n    for x, y in loader:")
    text = text.replace("    for x, y in loader:\n        loss", "    for x, y in loader:  # 😀 x\n        loss", 1)
    result = await start(client, text=text, encodings=[encoding])
    assert result.capabilities.position_encoding == encoding
    found = await diagnostics(client, 1)
    tpf001 = next(d for d in found if d.code == "TPF001")
    assert tpf001.range.start == types.Position(13, 4)
    assert tpf001.range.end == types.Position(13, len("    for x, y in loader"))
    noqa = next(a for a in await actions(client, 13) if a.title.startswith("Suppress"))
    edit = noqa.edit.document_changes[0].edits[0]
    assert edit.range.start.character == len("    for x, y in loader:  # ") + unit + len(" x")


@pytest.mark.asyncio
async def test_pull_diagnostics_client(client: LanguageClient) -> None:
    result = await start(client, pull=True)
    assert result.capabilities.diagnostic_provider is not None
    report = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(types.TextDocumentIdentifier(URI)))
    assert sorted(d.code for d in report.items) == ["TPF001", "TPF007"]
    unknown = await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(types.TextDocumentIdentifier("file:///nope.py")))
    assert not unknown.items
    await asyncio.sleep(0.1)
    assert URI not in client.diagnostics  # no push to a pull client


@pytest.mark.asyncio
async def test_malformed_requests_keep_serving(client: LanguageClient) -> None:
    track_versions(client)
    await start(client)
    await diagnostics(client, 1)
    nowhere = types.TextDocumentIdentifier("file:///does/not/exist.py")
    far = types.Range(types.Position(10_000, 5), types.Position(20_000, 0))
    assert not await client.text_document_code_action_async(types.CodeActionParams(nowhere, far, types.CodeActionContext([])))
    assert not await client.text_document_inlay_hint_async(types.InlayHintParams(nowhere, far))
    assert await client.text_document_hover_async(types.HoverParams(nowhere, types.Position(3, 3))) is None
    assert await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(URI), types.Position(9999, 99))) is None
    got = await client.text_document_code_action_async(types.CodeActionParams(types.TextDocumentIdentifier(URI), far, types.CodeActionContext([])))
    assert not got
    bogus = await client.code_action_resolve_async(types.CodeAction(title="x", data={"uri": URI, "action": "fix", "code": 3}))
    assert bogus.edit is None
    # garbage params, written raw (the client would refuse to serialise them)
    for message in (
        {"jsonrpc": "2.0", "id": "garbage-1", "method": "textDocument/hover", "params": {"garbage": True}},
        {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": 5, "contentChanges": "x"}},
        {"jsonrpc": "2.0", "id": "garbage-2", "method": "textDocument/codeAction", "params": [1, 2]},
    ):
        body = json.dumps(message)
        client.protocol.writer.write(f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    hover = await client.text_document_hover_async(types.HoverParams(types.TextDocumentIdentifier(URI), types.Position(7, 10)))
    assert hover is not None and "fc1" in hover.contents.value
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=URI),
        [types.TextDocumentContentChangePartial(types.Range(types.Position(500, 3), types.Position(400, 0)), "x = (\n")]))
    found = await diagnostics(client, 2)
    assert found  # still serving (a syntax error now, at the end)
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(types.TextDocumentIdentifier(URI), far))
    assert not hints


HELPERS = """def train_step(model, optimizer, batch):
    optimizer.zero_grad()
    loss = model(batch).sum()
    loss.backward()
    optimizer.step()
"""
MAIN = """import torch
import torch.nn as nn

from helpers import train_step

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in torch.randn(10, 8, 4):
    train_step(model, optimizer, batch)
"""


async def codes_when(client: LanguageClient, uri: str, want: list[str]) -> list[str]:
    got: list[str] = []
    for _ in range(250):
        await asyncio.sleep(0.02)
        got = sorted(str(d.code) for d in client.diagnostics.get(uri) or [])
        if got == want:
            break
    return got


@pytest.mark.asyncio
async def test_an_edit_to_an_imported_helper_rechecks_its_importer(client: LanguageClient, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    (tmp_path / "train.py").write_text(MAIN, encoding="utf-8")
    main_uri, helper_uri = (tmp_path / "train.py").as_uri(), (tmp_path / "helpers.py").as_uri()
    await client.initialize_session(types.InitializeParams(capabilities=caps(), initialization_options={"debounce": 0}))
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(main_uri, "python", 1, MAIN)))
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(helper_uri, "python", 1, HELPERS)))
    assert await codes_when(client, main_uri, []) == []  # the helper clears the gradients
    # delete zero_grad in the (unsaved) helper buffer: the importer is re-checked without being touched
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=helper_uri),
        [types.TextDocumentContentChangePartial(types.Range(types.Position(1, 0), types.Position(2, 0)), "")],
    ))
    assert await codes_when(client, main_uri, ["TPF001"]) == ["TPF001"]
    # closing the buffer unsaved: the file on disk (with zero_grad) is what counts again
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(helper_uri)))
    assert await codes_when(client, main_uri, []) == []


@pytest.mark.asyncio
async def test_each_workspace_folder_has_its_own_settings(client: LanguageClient, tmp_path: Path) -> None:
    folder_a, folder_b = tmp_path / "a", tmp_path / "b"
    for folder in (folder_a, folder_b):
        folder.mkdir()
        (folder / "train.py").write_text(TRAIN, encoding="utf-8")
    client.set_configuration({"debounce": 0, "ignore": ["TPF001"]}, section="torchPreflight", scope_uri=folder_b.as_uri())
    folders = [types.WorkspaceFolder(folder_a.as_uri(), "a"), types.WorkspaceFolder(folder_b.as_uri(), "b")]
    await client.initialize_session(types.InitializeParams(capabilities=caps(), workspace_folders=folders, initialization_options={"debounce": 0}))
    uri_a, uri_b = (folder_a / "train.py").as_uri(), (folder_b / "train.py").as_uri()
    for uri in (uri_a, uri_b):
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, TRAIN)))
    assert await codes_when(client, uri_a, ["TPF001", "TPF007"]) == ["TPF001", "TPF007"]
    assert await codes_when(client, uri_b, ["TPF007"]) == ["TPF007"]  # folder b ignores TPF001
