"""Seed for the mutation benchmark: a notebook-style tabular pipeline with a torch classifier."""

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn


def load_features(n=2000, d=16, seed=3):
    rng = np.random.default_rng(seed)
    features = rng.lognormal(size=(n, d)).astype(np.float32)
    target = (features[:, :4].sum(axis=1) > 6.5).astype(np.float32)
    return features, target


def build_model(d):
    return nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 1))


def main():
    features, target = load_features()
    x_train, x_val, y_train, y_val = train_test_split(features, target, test_size=0.25, stratify=target)
    scaler = StandardScaler().fit(x_train)
    x_train, x_val = scaler.transform(x_train), scaler.transform(x_val)

    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    xv, yv = torch.from_numpy(x_val), torch.from_numpy(y_val)
    model = build_model(xt.shape[1])
    criterion = nn.BCEWithLogitsLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(200):
        batch = torch.randint(0, len(xt), (128,))
        optimizer.zero_grad()
        loss = criterion(model(xt[batch]).squeeze(1), yt[batch])
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        probs = torch.sigmoid(model(xv).squeeze(1))
        print(f"val accuracy {((probs > 0.5).float() == yv).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
