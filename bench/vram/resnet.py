import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
AUTOCAST = False
OPT = "adam"


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class ResNet(nn.Module):
    def __init__(self, width=64, blocks=4, n_classes=100):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, n_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.blocks(x)
        x = torch.flatten(self.pool(x), 1)
        return self.fc(x)


model = ResNet()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(BATCH, 3, 32, 32)
    y = torch.randint(0, 100, (BATCH,))
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
