import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2))
val_loader = []


def evaluate():
    model.eval()
    with torch.no_grad():
        for x, y in val_loader:  # comment
            model(x)


def main():
    model.train()
    evaluate()
