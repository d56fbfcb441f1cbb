"""Regenerate the fixture notebooks: `.venv/bin/python tests/notebooks/build.py`.

Each notebook is written the way Jupyter writes one (nbformat 4.5: `indent=1`, sorted keys,
`ensure_ascii=False`, a trailing newline), with outputs and metadata, so the tests can check
that fixes keep everything but the fixed cells byte-identical. Inline `# error: TPF001`
comments in code cells are the expected findings (the line of the diagnostic's start)."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
KERNEL = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": "3.11.9",
    },
}


def lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def code(text: str, n: int | None = None, outputs: list | None = None, **metadata: object) -> dict:
    return {"cell_type": "code", "execution_count": n, "metadata": dict(metadata), "outputs": outputs or [], "source": lines(text)}


def md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": lines(text)}


def raw(text: str) -> dict:
    return {"cell_type": "raw", "metadata": {}, "source": lines(text)}


def stream(text: str) -> dict:
    return {"name": "stdout", "output_type": "stream", "text": lines(text)}


def image() -> dict:
    return {"data": {"image/png": PNG, "text/plain": ["<Figure size 640x480 with 1 Axes>"]}, "metadata": {}, "output_type": "display_data"}


def write(name: str, cells: list[dict], metadata: dict | None = None) -> None:
    for i, cell in enumerate(cells):
        cell["id"] = f"{name[:6]}-{i:02d}"
    nb = {"cells": cells, "metadata": KERNEL if metadata is None else metadata, "nbformat": 4, "nbformat_minor": 5}
    (HERE / f"{name}.ipynb").write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


TRAINING = [
    md("# Train a classifier\nThe optimizer is built in one cell, the loop runs in a later one."),
    code("%matplotlib inline\n!pip install -q torchvision\nimport torch\nimport torch.nn as nn\nfrom torch import optim", 1,
         [stream("Note: you may need to restart the kernel to use updated packages.\n")]),
    code(
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1 = nn.Linear(784, 256)\n"
        "        self.fc2 = nn.Linear(256, 10)\n"
        "\n"
        "    def forward(self, x):\n"
        "        return self.fc2(torch.relu(self.fc1(x)))",
        2,
    ),
    md("## Model and optimizer\nUnicode in markdown: é, ∑, 😀."),
    code("model = Net()\nmodel?", 3),
    code("solver = optim.Adam(model.parameters(), lr=1e-3)\ncrit = nn.CrossEntropyLoss()\ntotal = 0", 4, collapsed=False, tags=["setup"]),
    code(
        "%%time\n"
        "for x, y in loader:  # error: TPF001\n"
        "    out = model(x)\n"
        "    loss = crit(out, y)\n"
        "    loss.backward()\n"
        "    solver.step()\n"
        "    total += loss  # error: TPF005",
        5,
        [stream("CPU times: user 1.2 s, sys: 0 ns, total: 1.2 s\nWall time: 1.2 s\n")],
    ),
    code(
        "model.eval()\n"
        "for x, y in val_loader:  # error: TPF007\n"
        "    pred = model(x)",
        6,
        [image(), {"ename": "NameError", "evalue": "name 'val_loader' is not defined", "output_type": "error",
                   "traceback": ["\u001b[0;31mNameError\u001b[0m: name 'val_loader' is not defined"]}],
    ),
]

LEAKAGE = [
    md("# Leakage across cells\nThe scaler is fitted in cell 3, the data is split in cell 5."),
    code("import pandas as pd\nfrom sklearn.model_selection import train_test_split\nfrom sklearn.preprocessing import MinMaxScaler, StandardScaler", 1),
    code("df = pd.read_csv(\"data.csv\")\nX = df.drop(columns=[\"label\"]).values\ny = df[\"label\"].values\nscaler = StandardScaler()\nX_scaled = scaler.fit_transform(X)  # error: TPF201", 2),
    md("Now split:"),
    code("X_train, X_test, y_train, y_test = train_test_split(X_scaled, y, test_size=0.2)", 3),
    md("The right way: split first, fit on the training part only."),
    code("A_train, A_test, b_train, b_test = train_test_split(X, y)", 4),
    code("mm = MinMaxScaler().fit(A_train)\nA_train = mm.transform(A_train)\nA_test = mm.transform(A_test)", 5),
]

MAGICS = [
    code("%load_ext autoreload\n%autoreload 2\nget_ipython().run_line_magic('matplotlib', 'inline')\n!nvidia-smi\n!!ls\nfiles = !ls *.pt\nlisting = %sx ls\npip install numpy", 1),
    code("%%bash\nfor f in *.csv; do\n  echo $f\ndone", 2),
    raw("this is a raw cell: for x in y"),
    code("import torch\n?torch.nn\ntorch.nn.Linear??\nnotes = \"\"\"\n%not a magic, inside a string\nwhat?\n\"\"\"\nif torch.cuda.is_available():\n    !nvidia-smi -L\n    %env CUDA_VISIBLE_DEVICES=0\ndef restore(path):\n    return torch.load(path, weights_only=False)  # error: TPF301", 3),
    code("%%capture captured\ndef load(path):\n    %time x = 1\n    return torch.load(path, pickle_module=pickle)  # error: TPF301", 4),
    code("%%writefile helper.py\nimport os\nprint(torch.load('not analysed: not a Python cell of this notebook'))", 5),
    code("", None),
]

GOOD = [
    md("# A clean notebook"),
    code("import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\ncrit = nn.MSELoss()", 1),
    code("%%time\nfor x, y in loader:\n    opt.zero_grad()\n    loss = crit(model(x), y)\n    loss.backward()\n    opt.step()", 2),
    code("model.eval()\nwith torch.no_grad():\n    for x, y in val_loader:\n        pred = model(x)", 3),
]

R_NOTEBOOK = [code("library(ggplot2)\nx <- c(1, 2, 3)", 1)]

# Valid IPython that is not Python: none of it is a syntax error, and what is Python is analysed.
IPYTHON = [
    code("import torch\nimport torch.nn as nn\ntorch.*Tensor?\nnn.Linear??\nmodel = nn.Linear(4, 2)\nmodel?\nmodel.forward??", 1),
    code("files = !ls *.pt\nfirst, rest = !ls\nresult = %timeit -o sum(range(10))\n%time total = sum(\n    range(10))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)", 2),
    # a cell indented as a whole: IPython dedents it, and columns still map to the cell as written
    code("    def restore(path):\n        return torch.load(path, weights_only=False)  # error: TPF301\n\n    state = restore('ckpt.pt')", 3),
    code("%%time\nfor x, y in loader:  # error: TPF001\n    loss = ((model(x) - y) ** 2).mean()\n    loss.backward()\n    opt.step()", 4),
    code("%%timeit -n 1 -r 1\nweights = torch.load(checkpoint_path, weights_only=False)  # error: TPF301", 5),
    code("%%capture out\nfor x, y in val_loader:  # error: TPF007\n    pred = model(x)\n    print(pred.sum())", 6),
    code("%%bash\nfor f in *.pt; do echo $f; done", 7),
    code("%%writefile broken.py\ndef half(x:\n    return x /", 8),
]

# An exercise notebook: cells left for the reader to complete do not parse. Each is one syntax
# error; the loop around a blank is not analysed as if it were known; the other cells are.
EXERCISE = [
    code("import torch\nimport torch.nn as nn\nG, D = nn.Linear(8, 4), nn.Linear(4, 1)\nopt_g = torch.optim.Adam(G.parameters())\nopt_d = torch.optim.Adam(D.parameters())\ncriterion = nn.BCEWithLogitsLoss()", 1),
    code("for real in loader:\n    fake = G(torch.randn(real.size(0), 8))\n    d_loss =   # syntax error: TODO compute the discriminator loss\n    d_loss.backward()\n    opt_d.step()\n    g_loss = criterion(D(fake), torch.ones(real.size(0), 1))\n    g_loss.backward()\n    opt_g.step()", 2),
    code("def evaluate(batch):\n    return D(G(batch)).mean(  # syntax error\n\nscore = evaluate(torch.randn(4, 8))", 3),
    code("for real in loader:  # error: TPF001\n    loss = criterion(D(real), torch.ones(real.size(0), 1))\n    loss.backward()\n    opt_d.step()", 4),
]

# A message that names another line: in a notebook, a cell and a line (cell 4, line 1).
EPOCHS = [
    code("import torch\nmodel = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)", 1),
    md("## Training"),
    code("def train_one_epoch(model, loader):\n    for x, y in loader:  # error: TPF009\n        opt.zero_grad()\n"
         "        model(x).sum().backward()\n        opt.step()", 2),
    code("for epoch in range(3):\n    train_one_epoch(model, loader)\n    model.eval()\n    with torch.no_grad():\n"
         "        for x, y in val:\n            model(x)", 3),
]

if __name__ == "__main__":
    write("training", TRAINING)
    write("leakage", LEAKAGE)
    write("magics", MAGICS)
    write("good", GOOD)
    write("ipython", IPYTHON)
    write("exercise", EXERCISE)
    write("epochs", EPOCHS)
    write("r_kernel", R_NOTEBOOK, {"kernelspec": {"display_name": "R", "language": "R", "name": "ir"}, "language_info": {"name": "R"}})
