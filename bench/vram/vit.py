import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 8
AUTOCAST = False
OPT = "adam"


class ViT(nn.Module):
    def __init__(self, image=32, patch=4, dim=128, depth=2, heads=4, n_classes=10):
        super().__init__()
        self.patch = patch
        n = (image // patch) ** 2
        self.to_patch = nn.Linear(3 * patch * patch, dim)
        self.pos = nn.Parameter(torch.zeros(1, n, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        b, c, h, w = x.shape
        p = self.patch
        x = x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)
        x = self.to_patch(x) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x).mean(dim=1))


model = ViT()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(BATCH, 3, 32, 32)
    y = torch.randint(0, 10, (BATCH,))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
