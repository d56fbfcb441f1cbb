import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 4096)
        self.fc2 = nn.Linear(4096, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()


def train(loader):
    model.train()
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()


def evaluate(loader):
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    return correct


if __name__ == "__main__":
    data = [(torch.randn(64, 784), torch.randint(0, 10, (64,))) for _ in range(10)]
    train(data)
    print(evaluate(data))
