import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
AUTOCAST = False
OPT = "adam"


class Recommender(nn.Module):
    def __init__(self, n_users=10000, n_items=5000, dim=64):
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, u, i):
        return self.mlp(torch.cat([self.user(u), self.item(i)], dim=1)).squeeze(1)


model = Recommender()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    u = torch.randint(0, 10000, (BATCH,))
    i = torch.randint(0, 5000, (BATCH,))
    r = torch.rand(BATCH)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.mse_loss(model(u, i), r)
    loss.backward()
    optimizer.step()
