import torch

model = torch.nn.Linear(4, 2)
criterion = torch.nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = []
total = 0.0
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss  # running sum
    total = total + loss
print(total / len(loader))
