import torch

model = torch.nn.Linear(4, 2)
val_loader = []


def evaluate():
	model.eval()
	with torch.no_grad():
		for x, y in val_loader:  # comment
			out = model(x)
			print("""multi
line %s
  string""" % out.sum().item())

			msg = f"""
{out.shape}
"""
