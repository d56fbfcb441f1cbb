import torch.nn as nn


class Net(nn.Module):
    def __init__(self, dim):
        """A tiny network."""
        self.fc = nn.Linear(dim, 2)

    def forward(self, x):
        return self.fc(x)


class Late(nn.Module):
    def __init__(self, dim):
        self.dim = dim
        self.fc = nn.Linear(dim, 2)
        super().__init__()

    def forward(self, x):
        return self.fc(x)
