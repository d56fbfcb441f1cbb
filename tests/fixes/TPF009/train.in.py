import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader, val_loader = [], []


def evaluate():
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:
            model(x)


def main():
    for epoch in range(10):
        # one epoch
        for x, y in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
        evaluate()
