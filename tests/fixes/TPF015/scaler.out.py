import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler()
loader = []
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)  # step
    scaler.update()
