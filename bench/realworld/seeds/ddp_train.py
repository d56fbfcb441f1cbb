"""Seed for the mutation benchmark: a DistributedDataParallel training script."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 4))

    def forward(self, x):
        return self.body(x)


def run(rank, world_size, epochs=2):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=64, sampler=sampler)
    model = DDP(TinyNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        total = 0.0
        for inputs, targets in loader:
            optimizer.zero_grad(set_to_none=True)
            logits = model(inputs)
            loss = F.cross_entropy(logits, targets)
            loss.backward()
            optimizer.step()
            total += loss.item()
        if rank == 0:
            print(f"epoch {epoch} loss {total / len(loader):.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    run(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))
