import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.fc(self.drop(x))


def fit(model, opt, x, y):
    model.train()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def test(model, x, y):
    if x is not None:
        with torch.no_grad():
            out = model(x)
        return (out.argmax(1) == y).float().mean().item()
    return 0.0


def main(x, y):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(10):
        fit(model, opt, x, y)
        print(test(model, x, y))
