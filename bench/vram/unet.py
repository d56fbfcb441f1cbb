import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
AUTOCAST = False
OPT = "adam"


def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.down1 = double_conv(1, c)
        self.down2 = double_conv(c, 2 * c)
        self.pool = nn.MaxPool2d(2)
        self.bottom = double_conv(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = double_conv(4 * c, 2 * c)
        self.up1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec1 = double_conv(2 * c, c)
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        b = self.bottom(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.out(u1)


model = UNet()

if OPT == "sgd":
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
elif OPT == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(3):
    x = torch.randn(BATCH, 1, 64, 64)
    y = torch.randn(BATCH, 1, 64, 64)
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
