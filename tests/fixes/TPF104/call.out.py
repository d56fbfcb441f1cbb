import torch.nn as nn

model = nn.Linear(4, 2)
logits = model(x)
net = nn.Sequential(nn.Linear(4, 2))
out = net(
    x
)
