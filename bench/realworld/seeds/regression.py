"""Seed for the mutation benchmark: a regression model trained and validated per epoch."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class Regressor(nn.Module):
    def __init__(self, d_in=8):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(d_in, 32), nn.Tanh(), nn.Dropout(0.1), nn.Linear(32, 1))

    def forward(self, x):
        return self.layers(x).squeeze(-1)


def evaluate(model, loader, loss_fn):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for xb, yb in loader:
            total += loss_fn(model(xb), yb).item() * len(xb)
    return total / len(loader.dataset)


def fit(epochs=5):
    torch.manual_seed(1)
    x = torch.randn(600, 8)
    y = x @ torch.randn(8) + 0.1 * torch.randn(600)
    train_set, val_set = random_split(TensorDataset(x, y), [500, 100])
    train_loader = DataLoader(train_set, batch_size=25, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=100)
    model = Regressor()
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    losses = []
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_loader:
            optimizer.zero_grad()
            pred = model(xb)
            loss = loss_fn(pred, yb)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        val = evaluate(model, val_loader, loss_fn)
        print(f"epoch {epoch}: last train loss {losses[-1]:.4f}, val loss {val:.4f}")
    return model


if __name__ == "__main__":
    fit()
