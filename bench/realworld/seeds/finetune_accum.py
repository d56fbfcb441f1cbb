"""Seed for the mutation benchmark: fine-tuning with gradient accumulation inside a function."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Encoder(nn.Module):
    def __init__(self, vocab=1000, dim=64, n_labels=3):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(dim, n_labels)

    def forward(self, tokens):
        return self.head(self.drop(self.norm(self.embed(tokens))))


def train_one_epoch(model, loader, optimizer, scheduler, grad_accum=8, max_norm=1.0):
    model.train()
    seen = 0
    for i, (tokens, labels) in enumerate(loader):
        logits = model(tokens)
        loss = F.cross_entropy(logits, labels) / grad_accum
        loss.backward()
        seen += len(labels)
        if (i + 1) % grad_accum == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    return seen


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    hits = 0
    for tokens, labels in loader:
        hits += (model(tokens).argmax(-1) == labels).sum().item()
    return hits / len(loader.dataset)


def main(epochs=2):
    torch.manual_seed(0)
    tokens = torch.randint(0, 1000, (640, 16))
    labels = torch.randint(0, 3, (640,))
    train_loader = DataLoader(TensorDataset(tokens[:512], labels[:512]), batch_size=8, shuffle=True)
    val_loader = DataLoader(TensorDataset(tokens[512:], labels[512:]), batch_size=64)
    model = Encoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=10)
    for epoch in range(epochs):
        train_one_epoch(model, train_loader, optimizer, scheduler)
        print(f"epoch {epoch}: val accuracy {evaluate(model, val_loader):.3f}")


if __name__ == "__main__":
    main()
