import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
AUTOCAST = False
OPT = "adam"


class Seq2Seq(nn.Module):
    def __init__(self, vocab=1000, emb=64, hidden=128):
        super().__init__()
        self.src_emb = nn.Embedding(vocab, emb)
        self.tgt_emb = nn.Embedding(vocab, emb)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)
        self.decoder = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, tgt):
        _, h = self.encoder(self.src_emb(src))
        h0 = torch.tanh(self.bridge(torch.cat([h[0], h[1]], dim=1))).unsqueeze(0)
        dec, _ = self.decoder(self.tgt_emb(tgt), h0)
        return self.out(dec)


model = Seq2Seq()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    src = torch.randint(0, 1000, (BATCH, 30))
    tgt = torch.randint(0, 1000, (BATCH, 25))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(src, tgt).reshape(-1, 1000), tgt.reshape(-1))
    loss.backward()
    optimizer.step()
