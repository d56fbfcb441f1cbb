import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
AUTOCAST = False
OPT = "adam"


class LSTMLM(nn.Module):
    def __init__(self, vocab=2000, emb=128, hidden=256, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return self.out(h)


model = LSTMLM()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randint(0, 2000, (BATCH, 35))
    y = torch.randint(0, 2000, (BATCH, 35))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(x).reshape(-1, 2000), y.reshape(-1))
    loss.backward()
    optimizer.step()
