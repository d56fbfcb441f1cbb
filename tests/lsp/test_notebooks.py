"""End-to-end tests of notebook support in the language server (pytest-lsp): LSP 3.17
notebook sync (open, edit a cell, add and remove cells, close) with diagnostics per cell
URI that move with their cells, quick fixes / hover / inlay hints inside cells, and
`vscode-notebook-cell:` cells sent as plain text documents."""

from __future__ import annotations

import asyncio
import re

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient
from test_server import CONFIG, apply, track_versions

NB = "file:///tmp/tp_lsp_test/train.ipynb"
IMPORTS = "%matplotlib inline\nimport torch\nimport torch.nn as nn\nfrom torch import optim"
MODEL = "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc1 = nn.Linear(784, 2048)\n        self.fc2 = nn.Linear(2048, 10)"
BUILD = "model = Net()\nsolver = optim.SGD(model.parameters(), lr=0.1)"
LOOP = "%%time\nfor x, y in loader:\n    loss = crit(model(x), y)\n    loss.backward()\n    solver.step()"
EVAL = "model.eval()\nfor x, y in val_loader:\n    pred = model(x)"
ZERO = "solver.zero_grad()"


def cell_uri(n: int) -> str:
    return f"vscode-notebook-cell:/tmp/tp_lsp_test/train.ipynb#W{n}sZmlsZQ%3D%3D"


def caps() -> types.ClientCapabilities:
    return types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
            code_action=types.CodeActionClientCapabilities(),
        ),
        workspace=types.WorkspaceClientCapabilities(configuration=True),
        notebook_document=types.NotebookDocumentClientCapabilities(
            synchronization=types.NotebookDocumentSyncClientCapabilities(execution_summary_support=True)
        ),
    )


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: LanguageClient):
    lsp_client.set_configuration({"debounce": 0}, section="torch-preflight")
    lsp_client.set_configuration({"debounce": 0}, section="torchPreflight")
    yield
    await lsp_client.shutdown_session()


def cell(n: int, kind: types.NotebookCellKind = types.NotebookCellKind.Code) -> types.NotebookCell:
    return types.NotebookCell(kind=kind, document=cell_uri(n))


def item(n: int, text: str, language: str = "python", version: int = 1) -> types.TextDocumentItem:
    return types.TextDocumentItem(uri=cell_uri(n), language_id=language, version=version, text=text)


async def open_notebook(client: LanguageClient, texts: list[tuple[int, str, str]]) -> types.InitializeResult:
    """texts: (cell number, language, text); 'markdown' cells are markup cells."""
    result = await client.initialize_session(types.InitializeParams(capabilities=caps(), initialization_options={"debounce": 0}))
    cells = [cell(n, types.NotebookCellKind.Markup if lang == "markdown" else types.NotebookCellKind.Code) for n, lang, _ in texts]
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=NB, notebook_type="jupyter-notebook", version=1, cells=cells),
        cell_text_documents=[item(n, text, lang) for n, lang, text in texts],
    ))
    return result


async def settle(client: LanguageClient, want: dict[str, list[tuple[str, int]]], tries: int = 250) -> dict[str, list[tuple[str, int]]]:
    """Wait until the published diagnostics (code, line) per cell URI equal `want`."""
    got: dict[str, list[tuple[str, int]]] = {}
    for _ in range(tries):
        await asyncio.sleep(0.02)
        got = {uri: sorted((str(d.code), d.range.start.line) for d in diags) for uri, diags in client.diagnostics.items() if uri in want}
        if got == want:
            return got
    raise AssertionError(f"diagnostics {got} != {want}")


CELLS = [(0, "markdown", "# Training"), (1, "python", IMPORTS), (2, "python", MODEL), (3, "python", BUILD), (4, "python", LOOP), (5, "python", EVAL)]


@pytest.mark.asyncio
async def test_notebook_sync_is_advertised_for_python_cells(client: LanguageClient) -> None:
    result = await open_notebook(client, CELLS)
    sync = result.capabilities.notebook_document_sync
    assert sync is not None
    selector = sync.notebook_selector[0]
    assert [c.language for c in selector.cells] == ["python"]


@pytest.mark.asyncio
async def test_diagnostics_per_cell_and_cross_cell(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, CELLS)
    # the loop of cell 4 steps the optimizer built in cell 3: only the joined notebook knows
    await settle(client, {cell_uri(1): [], cell_uri(2): [], cell_uri(3): [], cell_uri(4): [("TPF001", 1)], cell_uri(5): [("TPF007", 1)]})
    assert cell_uri(0) not in client.diagnostics  # markdown: nothing published
    tpf001 = client.diagnostics[cell_uri(4)][0]
    assert tpf001.range.start == types.Position(1, 0)
    related = tpf001.related_information or []
    assert related and related[0].location.uri == cell_uri(4) and related[0].location.range.start.line == 4


EPOCHS = [
    (0, "markdown", "# Exercise"),
    (1, "python", "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)"),
    (2, "python", "def train_one_epoch(model, loader):\n    for x, y in loader:\n        opt.zero_grad()\n"
                  "        model(x).sum().backward()\n        opt.step()"),
    (3, "python", "for epoch in range(3):\n    train_one_epoch(model, loader)\n    model.eval()\n    with torch.no_grad():\n"
                  "        for x, y in val:\n            model(x)"),
    (4, "python", "loss = "),
    (5, "python", "    torch.*Tensor?\n    files = !ls\n    score = evaluate(\n"),
]


@pytest.mark.asyncio
async def test_messages_name_cells_and_each_broken_cell_has_its_error(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, EPOCHS)
    # cell 5 is dedented (IPython runs it so): only its unclosed call is an error, where the cell has it
    await settle(client, {cell_uri(1): [], cell_uri(2): [("TPF009", 1)], cell_uri(3): [], cell_uri(4): [("E999", 0)], cell_uri(5): [("E999", 2)]})
    tpf009 = client.diagnostics[cell_uri(2)][0]
    assert "(cell 4, line 1)" in tpf009.message
    places = {(r.location.uri, r.location.range.start.line) for r in tpf009.related_information or []}
    # `model.eval()` and the epoch loop, in their cell; the start of `train_one_epoch()`, where its `train()` belongs
    assert places == {(cell_uri(3), 2), (cell_uri(3), 0), (cell_uri(2), 1)}
    error = client.diagnostics[cell_uri(5)][0]
    assert error.range.start.character == len("    score = evaluate")


@pytest.mark.asyncio
async def test_edit_a_cell_and_diagnostics_follow(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, CELLS)
    await settle(client, {cell_uri(4): [("TPF001", 1)], cell_uri(5): [("TPF007", 1)]})
    # insert zero_grad in the loop cell (a text edit on the cell): TPF001 goes away
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=NB),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(version=2, uri=cell_uri(4)),
                changes=[types.TextDocumentContentChangePartial(range=types.Range(types.Position(2, 0), types.Position(2, 0)), text=f"    {ZERO}\n")],
            )
        ])),
    ))
    await settle(client, {cell_uri(4): [], cell_uri(5): [("TPF007", 1)]})


@pytest.mark.asyncio
async def test_add_and_remove_cells_move_the_diagnostics(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, CELLS)
    await settle(client, {cell_uri(4): [("TPF001", 1)], cell_uri(5): [("TPF007", 1)]})
    # a new cell before the loop builds a second loop without zero_grad; the eval cell is removed
    new_loop = "for x, y in loader:\n    crit(model(x), y).backward()\n    solver.step()"
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=NB),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(
            array=types.NotebookCellArrayChange(start=4, delete_count=0, cells=[cell(9)]),
            did_open=[item(9, "\n" + new_loop)],
        ))),
    ))
    await settle(client, {cell_uri(9): [("TPF001", 1)], cell_uri(4): [("TPF001", 1)], cell_uri(5): [("TPF007", 1)]})
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(version=3, uri=NB),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(
            array=types.NotebookCellArrayChange(start=6, delete_count=1, cells=[]),
            did_close=[types.TextDocumentIdentifier(uri=cell_uri(5))],
        ))),
    ))
    await settle(client, {cell_uri(9): [("TPF001", 1)], cell_uri(4): [("TPF001", 1)], cell_uri(5): []})
    # removing the cell that builds the optimizer: the loops no longer step a known optimizer
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(version=4, uri=NB),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(structure=types.NotebookDocumentCellChangeStructure(
            array=types.NotebookCellArrayChange(start=3, delete_count=1, cells=[]),
            did_close=[types.TextDocumentIdentifier(uri=cell_uri(3))],
        ))),
    ))
    await settle(client, {cell_uri(9): [], cell_uri(4): [], cell_uri(3): []})
    client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
        notebook_document=types.NotebookDocumentIdentifier(uri=NB),
        cell_text_documents=[types.TextDocumentIdentifier(uri=cell_uri(n)) for n in (0, 1, 2, 9, 4)],
    ))
    await settle(client, {cell_uri(9): [], cell_uri(4): []})


@pytest.mark.asyncio
async def test_quick_fix_inside_a_cell(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, CELLS)
    await settle(client, {cell_uri(4): [("TPF001", 1)], cell_uri(5): [("TPF007", 1)]})
    rng = types.Range(types.Position(1, 0), types.Position(1, 0))
    got = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(cell_uri(5)), rng, types.CodeActionContext(diagnostics=[])))
    wrap = next(a for a in got or [] if isinstance(a, types.CodeAction) and "no_grad" in a.title)
    assert wrap.edit is not None
    assert [c.text_document.uri for c in wrap.edit.document_changes] == [cell_uri(5)]
    assert apply(EVAL, wrap.edit) == "model.eval()\nwith torch.no_grad():\n    for x, y in val_loader:\n        pred = model(x)"
    got = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(cell_uri(4)), rng, types.CodeActionContext(diagnostics=[])))
    titles = [a.title for a in got or [] if isinstance(a, types.CodeAction)]
    assert "Suppress TPF001 on this line" in titles
    noqa = next(a for a in got or [] if isinstance(a, types.CodeAction) and a.title.startswith("Suppress"))
    assert apply(LOOP, noqa.edit).split("\n")[1] == "for x, y in loader:  # noqa: TPF001"
    fix_all = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(cell_uri(1)), rng, types.CodeActionContext(diagnostics=[], only=["source.fixAll"])))
    action = next(a for a in fix_all or [] if isinstance(a, types.CodeAction))
    assert [c.text_document.uri for c in action.edit.document_changes] == [cell_uri(5)]


@pytest.mark.asyncio
async def test_hover_and_inlay_hints_inside_cells(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, CELLS)
    await settle(client, {cell_uri(4): [("TPF001", 1)]})
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=types.TextDocumentIdentifier(cell_uri(2)), range=types.Range(types.Position(0, 0), types.Position(10, 0))))
    assert [h.position.line for h in hints or []] == [3, 4]  # the two Linear layers of cell 2
    assert "params" in str(hints[0].label)
    total = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=types.TextDocumentIdentifier(cell_uri(3)), range=types.Range(types.Position(0, 0), types.Position(5, 0))))
    assert [h.position.line for h in total or []] == [0]  # `model = Net()` in cell 3
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(cell_uri(2)), position=types.Position(3, 10)))
    assert hover is not None and "fc1" in hover.contents.value


@pytest.mark.asyncio
async def test_hover_names_cells_in_the_estimates_assumptions(client: LanguageClient) -> None:
    track_versions(client)
    await open_notebook(client, [
        (1, "python", IMPORTS + "\nfrom torch.utils.data import DataLoader"), (2, "python", MODEL), (3, "markdown", "## Train"),
        (4, "python", BUILD + "\nloader = DataLoader(train_ds, batch_size=64)\nfor x, y in loader:\n    solver.zero_grad()\n"
                      "    model(x).sum().backward()\n    solver.step()"),
    ])
    await settle(client, {cell_uri(1): [], cell_uri(2): [], cell_uri(4): []})
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(cell_uri(2)), position=types.Position(3, 10)))
    assert hover is not None
    value = hover.contents.value
    # the estimate's assumptions cite the DataLoader of the fourth cell (its line 3), not module lines
    assert "(cell 4, line 3)" in value and "train.ipynb:" not in value
    assert all(m.group(1) for m in re.finditer(r"(cell \d+, )?\bline \d+", value)), value


@pytest.mark.asyncio
async def test_vscode_notebook_cell_as_plain_text_document(client: LanguageClient) -> None:
    """Without notebook sync, VS Code sends cells as text documents: each is analysed alone,
    magics neutralised (no syntax error for `%%time`)."""
    track_versions(client)
    await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(workspace=types.WorkspaceClientCapabilities(configuration=True)),
        initialization_options={"debounce": 0}))
    text = "%%time\nimport torch\nopt = torch.optim.SGD(params)\nfor x in loader:\n    !echo step\n    loss(x).backward()\n    opt.step()"
    client.text_document_did_open(types.DidOpenTextDocumentParams(item(7, text)))
    await settle(client, {cell_uri(7): [("TPF001", 3)]})
    got = await client.text_document_code_action_async(types.CodeActionParams(
        types.TextDocumentIdentifier(cell_uri(7)), types.Range(types.Position(3, 0), types.Position(3, 0)), types.CodeActionContext(diagnostics=[])))
    fix = next(a for a in got or [] if isinstance(a, types.CodeAction) and "zero_grad" in a.title)
    assert apply(text, fix.edit).split("\n")[:5] == ["%%time", "import torch", "opt = torch.optim.SGD(params)", "for x in loader:", "    opt.zero_grad()"]


@pytest.mark.asyncio
async def test_indented_cell_as_plain_text_document(client: LanguageClient) -> None:
    """A cell indented as a whole runs in IPython: no syntax error, findings where the cell has them."""
    track_versions(client)
    await client.initialize_session(types.InitializeParams(
        capabilities=types.ClientCapabilities(workspace=types.WorkspaceClientCapabilities(configuration=True)),
        initialization_options={"debounce": 0}))
    text = "    import torch\n    torch.*Tensor?\n    def load(p):\n        return torch.load(p, weights_only=False)"
    client.text_document_did_open(types.DidOpenTextDocumentParams(item(8, text)))
    await settle(client, {cell_uri(8): [("TPF301", 3)]})
    (d,) = client.diagnostics[cell_uri(8)]
    assert d.range.start.character == text.split("\n")[3].index("torch.load")
