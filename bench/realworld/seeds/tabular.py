"""Seed for the mutation benchmark: tabular data, scaled after the split, and a small MLP."""

import numpy as np
import torch
import torch.nn as nn
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

rng = np.random.default_rng(0)
X = rng.normal(size=(1000, 12)).astype(np.float32)
y = (X[:, 0] + 0.5 * X[:, 3] > 0).astype(np.int64)

X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
scaler = StandardScaler()
X_train = scaler.fit_transform(X_train)
X_test = scaler.transform(X_test)

xt = torch.tensor(X_train, dtype=torch.float32)
yt = torch.tensor(y_train)
xv = torch.tensor(X_test, dtype=torch.float32)
yv = torch.tensor(y_test)

model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

history = []
for _epoch in range(50):
    optimizer.zero_grad()
    loss = loss_fn(model(xt), yt)
    loss.backward()
    optimizer.step()
    history.append(loss.item())

model.eval()
with torch.no_grad():
    accuracy = (model(xv).argmax(dim=1) == yv).float().mean().item()
print(f"final loss {history[-1]:.4f}, test accuracy {accuracy:.3f}")
