import torch

state = torch.load(path, map_location="cpu", weights_only=True)
