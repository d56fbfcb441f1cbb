import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(in_features=784, out_features=256)
        self.fc2 = nn.Linear(in_features=256, out_features=64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc3(self.fc2(self.fc1(x).relu()))
