import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 32
AUTOCAST = False
OPT = "adam"


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class CNN(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 32), conv_bn(32, 32), nn.MaxPool2d(2),
            conv_bn(32, 64), conv_bn(64, 64), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, n_classes))

    def forward(self, x):
        return self.head(self.features(x))


model = CNN()

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
