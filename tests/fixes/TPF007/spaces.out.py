import torch as T

model = T.nn.Linear(4, 2)
test_loader = []


def evaluate():
    model.eval()
    correct = 0
    with T.no_grad():
        for x, y in test_loader:
            doc = """
not indented
"""
            correct += (model(x).argmax(1) == y).sum().item()  # count
    return correct
