import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 64
AUTOCAST = False
OPT = "adam"


class MLP(nn.Module):
    def __init__(self, d_in=784, hidden=1024, n_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = self.drop(torch.relu(self.fc2(x)))
        return self.fc3(x)


model = MLP()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(BATCH, 784)
    y = torch.randint(0, 10, (BATCH,))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
