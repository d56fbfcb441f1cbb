"""Idioms of the real-world scripts (bench/vram/realworld.py): an LBFGS step that runs its closure, torchvision's
FakeData at the size the script asks for, and a GAN's second model live through the first one's step."""

from __future__ import annotations

from torch_preflight.estimator import EstimateOptions, estimate_source

LBFGS = '''
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
x = torch.randn(256, 16)
y = torch.randn(256, 1)
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, history_size=10)
for i in range(5):
    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        return loss
    optimizer.step(closure)
'''

PARAMS = 16 * 64 + 64 + 64 + 1


def test_lbfgs_step_runs_its_closure_and_keeps_its_history() -> None:
    report = estimate_source(LBFGS, "t.py", EstimateOptions(device="cpu"))[0]
    assert report.complete, [u.text for u in report.unknowns]
    assert report.saved_activation_bytes  # the closure's forward was recorded as the step's
    # history_size pairs of flat vectors, the direction and previous flat gradient, the flat gradient held between
    # evaluations
    assert report.breakdown["optimizer_state"] == (2 * 10 + 3) * PARAMS * 4


def test_a_step_without_closure_still_steps_once() -> None:
    source = LBFGS.replace("optimizer.step(closure)", "closure()\n    optimizer.step()")
    report = estimate_source(source, "t.py", EstimateOptions(device="cpu"))[0]
    assert report.complete and report.saved_activation_bytes


FAKE = '''
import torch
import torch.nn as nn
import torchvision.datasets as dset
import torchvision.transforms as transforms

dataset = dset.FakeData(image_size=(3, 40, 40), transform=transforms.ToTensor())
loader = torch.utils.data.DataLoader(dataset, batch_size=8)
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 38 * 38, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
'''


def test_fakedata_reads_its_image_size() -> None:
    report = estimate_source(FAKE, "t.py", EstimateOptions(device="cpu"))[0]
    assert report.complete, [u.text for u in report.unknowns]
    assert any("(3, 40, 40)" in a.text for a in report.assumptions)
    assert report.layers[0].output_shape == (8, 8, 38, 38)


def test_fakedata_without_a_tensor_transform_is_not_known() -> None:
    source = FAKE.replace("transform=transforms.ToTensor()", "transform=transforms.Lambda(lambda im: im)")
    assert not estimate_source(source, "t.py", EstimateOptions(device="cpu"))[0].complete


GAN = '''
import torch
import torch.nn as nn

netG = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 64))
netD = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
optG = torch.optim.Adam(netG.parameters())
optD = torch.optim.Adam(netD.parameters())
criterion = nn.BCEWithLogitsLoss()
for step in range(3):
    real = torch.randn(32, 64)
    netD.zero_grad()
    fake = netG(torch.randn(32, 16))
    errD = criterion(netD(real), torch.ones(32, 1)) + criterion(netD(fake.detach()), torch.zeros(32, 1))
    errD.backward()
    optD.step()
    netG.zero_grad()
    errG = criterion(netD(fake), torch.ones(32, 1))
    errG.backward()
    optG.step()
'''

G_PARAMS = 16 * 256 + 256 + 256 * 64 + 64
D_PARAMS = 64 * 128 + 128 + 128 + 1


def test_gan_counts_the_other_model_through_each_step() -> None:
    reports = estimate_source(GAN, "t.py", EstimateOptions(device="cpu"))
    assert sorted(r.model_line for r in reports) == [4, 5]  # netG, netD (0-based lines)
    for report in reports:
        other = D_PARAMS if report.model_line == 4 else G_PARAMS
        # the other model's parameters, gradients and Adam's two moments, beside this step's batch
        assert report.breakdown["other"] >= 4 * other * 4
        assert any("other trained model" in a.text for a in report.assumptions)


def test_models_trained_apart_are_reported_apart() -> None:
    report = estimate_source(FAKE, "t.py", EstimateOptions(device="cpu"))[0]
    assert not any("other trained model" in a.text for a in report.assumptions)
    # two models, each its own forward, loss and step: neither step holds the other
    apart = GAN[:GAN.index("for step in range(3):")] + """for step in range(3):
    optD.zero_grad()
    criterion(netD(torch.randn(32, 64)), torch.ones(32, 1)).backward()
    optD.step()
    optG.zero_grad()
    netG(torch.randn(32, 16)).pow(2).mean().backward()
    optG.step()
"""
    for report in estimate_source(apart, "t.py", EstimateOptions(device="cpu")):
        assert not any("other trained model" in a.text for a in report.assumptions)


def test_a_forward_no_backward_consumes_keeps_its_graph_into_the_next_step() -> None:
    sampling = GAN + "    samples = netG(torch.randn(32, 16))\n"
    base = estimate_source(GAN, "t.py", EstimateOptions(device="cpu"))
    kept = estimate_source(sampling, "t.py", EstimateOptions(device="cpu"))
    for before, after in zip(base, kept, strict=True):
        assert after.peak_bytes > before.peak_bytes
        assert any("no backward consumes" in a.text for a in after.assumptions)
    nograd = GAN + "    with torch.no_grad():\n        samples = netG(torch.randn(32, 16))\n"
    for before, after in zip(base, estimate_source(nograd, "t.py", EstimateOptions(device="cpu")), strict=True):
        assert not any("no backward consumes" in a.text for a in after.assumptions)
        assert after.peak_bytes >= before.peak_bytes


def test_rmsprop_weight_decay_copies_the_gradients_in_its_step() -> None:
    from torch_preflight.estimator.timeline import optimizer_bytes
    from torch_preflight.estimator.values import Optimizer

    sizes = [1000, 3000]
    plain = Optimizer("RMSprop", None, momentum=True, foreach=True)
    decayed = Optimizer("RMSprop", None, momentum=True, foreach=True)
    decayed.weight_decay = True  # type: ignore[attr-defined]
    assert optimizer_bytes(plain, sizes, 4, "cpu") == (2 * 4000 * 4, 4000 * 4)
    assert optimizer_bytes(decayed, sizes, 4, "cpu") == (2 * 4000 * 4, 2 * 4000 * 4)
    single = Optimizer("RMSprop", None, foreach=False)
    single.weight_decay = True  # type: ignore[attr-defined]
    assert optimizer_bytes(single, sizes, 4, "cpu")[1] == 2 * 3000 * 4


VAE_LIKE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(784, 2000), nn.ReLU(), nn.Linear(2000, 784), nn.Sigmoid())
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(3):
    data = torch.rand(128, 784)
    optimizer.zero_grad()
    recon = model(data)
    loss = F.binary_cross_entropy(recon, data)
    loss.backward()
    optimizer.step()
'''


def test_an_output_the_script_holds_is_live_through_the_step_even_when_saved() -> None:
    # the sigmoid saves its output for backward; the script's `recon` keeps it after backward, through the step
    held = estimate_source(VAE_LIKE, "t.py", EstimateOptions(device="cpu"))[0]
    inline = estimate_source(VAE_LIKE.replace("    recon = model(data)\n", "").replace("(recon, data)", "(model(data), data)"),
                             "t.py", EstimateOptions(device="cpu"))[0]
    assert held.phase == inline.phase == "step"
    assert held.peak_bytes - inline.peak_bytes == 128 * 784 * 4


def test_lbfgs_history_is_bounded_by_a_known_number_of_steps() -> None:
    # one step of max_iter=20 iterations keeps 19 pairs, not history_size=100
    source = LBFGS.replace(", history_size=10", "").replace("range(5)", "range(1)")
    report = estimate_source(source, "t.py", EstimateOptions(device="cpu"))[0]
    assert report.breakdown["optimizer_state"] == (2 * 19 + 3) * PARAMS * 4
    # an unknown number of steps (a while loop) keeps history_size pairs: the steady state
    looping = source.replace("for i in range(1):", "while True:")
    report = estimate_source(looping, "t.py", EstimateOptions(device="cpu"))[0]
    assert report.breakdown["optimizer_state"] == (2 * 100 + 3) * PARAMS * 4


def test_a_pickle_the_script_loads_is_named_with_what_to_supply() -> None:
    source = LBFGS.replace("x = torch.randn(256, 16)", "data = torch.load('traindata.pt')\nx = torch.from_numpy(data[3:, :-1])")
    report = estimate_source(source, "t.py", EstimateOptions(device="cpu"))[0]
    assert not report.complete
    assert any("torch.load('traindata.pt')" in u.text and "--set data=VALUE" in u.text for u in report.unknowns)
    supplied = EstimateOptions(device="cpu", values=(("data", "torch.empty(259, 16)"),))
    assert estimate_source(source, "t.py", supplied)[0].complete


# word_language_model's data preparation: a class's __len__, `tensor.type(dtype)`, the lines' tensors joined
TOKENS = '''
import torch
import torch.nn as nn


class Vocab:
    def __init__(self):
        self.words = []

    def __len__(self):
        return len(self.words)


vocab = Vocab()
for w in ['a', 'b', 'c']:
    vocab.words.append(w)
ids = [torch.tensor([0, 1, 2]).type(TYPE), torch.tensor([2, 1]).type(TYPE)]
data = torch.cat(ids)
model = nn.Embedding(len(vocab), 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    model(torch.randint(0, 3, (2, 2))).sum().backward()
    opt.step()
'''


def test_a_class_len_a_dtype_conversion_and_joined_data() -> None:
    report = estimate_source(TOKENS.replace("TYPE", "torch.int64"), "t.py", EstimateOptions(device="cpu"))[0]
    assert report.complete, [u.text for u in report.unknowns]
    assert sum(layer.params for layer in report.layers) == 3 * 4  # len(vocab) is Vocab.__len__'s 3
    # the joined tensor (5 int64 values) is data the script keeps on the CPU: in the peak, as its parts are not
    kept = estimate_source(TOKENS.replace("TYPE", "torch.int64").replace("data = torch.cat(ids)", "data = torch.empty(5, dtype=torch.long)"),
                           "t.py", EstimateOptions(device="cpu"))[0]
    assert report.peak_bytes == kept.peak_bytes
    # a type that is not a dtype (a tensor type's name) is not guessed: said, and the joined data is unknown
    named = estimate_source(TOKENS.replace("TYPE", "torch.LongTensor"), "t.py", EstimateOptions(device="cpu"))[0]
    assert any("tensor.type()" in u.text for u in named.unknowns), [u.text for u in named.unknowns]
