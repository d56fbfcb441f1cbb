"""Seed for the mutation benchmark: gradient accumulation in one inline epoch loop."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACCUM_STEPS = 4
EPOCHS = 3


class MLP(nn.Module):
    def __init__(self, d_in=20, d_hidden=64, n_out=5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, d_hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(d_hidden, n_out))

    def forward(self, x):
        return self.net(x)


def main():
    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = torch.randint(0, 5, (1024,))
    train_loader = DataLoader(TensorDataset(x[:896], y[:896]), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[896:], y[896:]), batch_size=128)

    model = MLP()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    for epoch in range(EPOCHS):
        model.train()
        epoch_loss = 0.0
        for step, (xb, yb) in enumerate(train_loader):
            logits = model(xb)
            loss = criterion(logits, yb) / ACCUM_STEPS
            loss.backward()
            epoch_loss += loss.item()
            if (step + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()

        model.eval()
        correct = 0
        with torch.no_grad():
            for xb, yb in val_loader:
                pred = model(xb).argmax(dim=-1)
                correct += (pred == yb).sum().item()
        print(f"epoch {epoch}: train loss {epoch_loss:.3f}, val acc {correct / 128:.3f}")


if __name__ == "__main__":
    main()
