"""Seed for the mutation benchmark: a small image classifier with train/test functions."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def train(model, device, loader, optimizer, epoch, log_every=10):
    model.train()
    running = 0.0
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()
        running += loss.item()
        if batch_idx % log_every == 0:
            print(f"epoch {epoch} batch {batch_idx} loss {running / (batch_idx + 1):.4f}")
    return running / max(1, len(loader))


def test(model, device, loader):
    model.eval()
    test_loss = 0.0
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    n = len(loader.dataset)
    print(f"test loss {test_loss / n:.4f}, accuracy {correct / n:.3f}")
    return correct / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.randn(512, 1, 28, 28)
    labels = torch.randint(0, 10, (512,))
    train_loader = DataLoader(TensorDataset(images[:448], labels[:448]), batch_size=32, shuffle=True)
    test_loader = DataLoader(TensorDataset(images[448:], labels[448:]), batch_size=64)
    model = ConvNet().to(device)
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(1, args.epochs + 1):
        train(model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)


if __name__ == "__main__":
    main()
