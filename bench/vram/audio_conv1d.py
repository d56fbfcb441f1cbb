import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
AUTOCAST = False
OPT = "adam"


class AudioNet(nn.Module):
    def __init__(self, n_classes=35):
        super().__init__()
        self.conv1 = nn.Conv1d(1, 32, 80, stride=4)
        self.bn1 = nn.BatchNorm1d(32)
        self.pool1 = nn.MaxPool1d(4)
        self.conv2 = nn.Conv1d(32, 64, 3)
        self.bn2 = nn.BatchNorm1d(64)
        self.pool2 = nn.MaxPool1d(4)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = F.adaptive_avg_pool1d(x, 1).squeeze(-1)
        return self.fc(x)


model = AudioNet()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(BATCH, 1, 16000)
    y = torch.randint(0, 35, (BATCH,))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
