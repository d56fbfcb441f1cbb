import torch

model = torch.nn.Linear(4, 2)
opt_g = torch.optim.Adam(model.parameters())
loader = []

for step, (x, y) in enumerate(loader):
    # comment first
    loss = model(x).sum()
    loss.backward()
    opt_g.step()
