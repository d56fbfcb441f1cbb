"""The same classifier, written correctly: torch-preflight reports nothing."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Net(nn.Module):
    def __init__(self, hidden: int = 256):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.dropout = nn.Dropout(0.2)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(self.dropout(x))


def train_one_epoch(model, loader, optimizer, criterion):
    model.train()
    running_loss = 0.0
    for images, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        running_loss += loss.item()
    return running_loss / len(loader)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = 0
    for images, labels in loader:
        correct += (model(images).argmax(1) == labels).sum().item()
    return correct / len(loader.dataset)


if __name__ == "__main__":
    train_set = torch.utils.data.TensorDataset(torch.randn(512, 1, 28, 28), torch.randint(0, 10, (512,)))
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(3):
        print(epoch, train_one_epoch(model, loader, optimizer, criterion), evaluate(model, loader))
