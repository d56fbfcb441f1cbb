"""Generate a synthetic training module of about N lines for the LSP benchmark."""

from __future__ import annotations

HEADER = '''"""A generated training module for the language-server benchmark."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

'''

MODEL = '''
class Net{i}(nn.Module):
    def __init__(self, hidden={h}):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(0.1)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = self.drop(F.relu(self.fc2(x)))
        return self.fc3(x)

'''

TRAIN = '''
def train_{i}(model, loader, optimizer, criterion, epochs=3):
    model.train()
    total = 0.0
    for epoch in range(epochs):
        for x, y in loader:
            {zero}
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            total += loss.item()
    return total


def evaluate_{i}(model, loader):
    model.eval()
    correct = 0
    for x, y in loader:
        pred = model(x).argmax(1)
        correct += (pred == y).sum().item()
    return correct


def helper_{i}(values):
    acc = []
    for v in values:
        if v % 2 == 0:
            acc.append(v * 2)
        else:
            acc.append(v)
    return sum(acc)

'''


def generate(lines: int = 3000) -> str:
    parts = [HEADER]
    i = 0
    count = HEADER.count("\n")
    while count < lines - 20:
        chunk = MODEL.format(i=i, h=256 + i) + TRAIN.format(i=i, zero="optimizer.zero_grad()" if i % 3 else "pass")
        parts.append(chunk)
        count += chunk.count("\n")
        i += 1
    parts.append(
        "\n\ndef main():\n    model = Net0()\n    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)\n"
        "    loader = DataLoader(list(range(10)), batch_size=32)\n    train_0(model, loader, optimizer, nn.CrossEntropyLoss())\n"
    )
    return "".join(parts)


if __name__ == "__main__":
    import sys

    text = generate(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
    sys.stdout.write(text)
