import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = []


def train():
	for x, y in loader:  # keep this comment
		loss = model(x).sum()  # and this one
		loss.backward()
		optimizer.step()
