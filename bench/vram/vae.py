import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
AUTOCAST = False
OPT = "adam"


class VAE(nn.Module):
    def __init__(self, d=784, hidden=400, z=20):
        super().__init__()
        self.enc = nn.Linear(d, hidden)
        self.mu = nn.Linear(hidden, z)
        self.logvar = nn.Linear(hidden, z)
        self.dec1 = nn.Linear(z, hidden)
        self.dec2 = nn.Linear(hidden, d)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z))))


model = VAE()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.rand(BATCH, 784)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.binary_cross_entropy(model(x), x)
    loss.backward()
    optimizer.step()
