"""Values from the way real scripts configure themselves, and the layers and idioms of real models (issue 18)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, configs, estimate_source, reshape
from torch_preflight.estimator.scope import CORPUS_BYTES

from torch_preflight.cli import main


def one(src: str, path: str = "train.py", **opts: object) -> MemoryReport:
    (report,) = estimate_source(textwrap.dedent(src), path, EstimateOptions(device="cpu", **opts))  # type: ignore[arg-type]
    return report


ARGPARSE = """\
import argparse
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--batch-size', type=int, default=64, metavar='N')
    group = parser.add_argument_group('model')
    group.add_argument('--hidden', type=str, default='128')
    parser.add_argument('--no-cuda', action='store_true')
    parser.add_argument('data', nargs='?', default='data')
    args = parser.parse_args()
    model = Net(int(args.hidden))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = torch.utils.data.TensorDataset(torch.randn(1000, 64), torch.randint(0, 10, (1000,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

if __name__ == '__main__':
    main()
"""


def params(report: MemoryReport) -> int:
    return sum(layer.params for layer in report.layers)


def test_argparse_defaults_read_inside_main() -> None:
    report = one(ARGPARSE)
    assert report.complete, report.unknowns
    assert any(a.text.startswith("batch_size=64 from") for a in report.assumptions)
    assert params(report) == 64 * 128 + 128 + 128 * 10 + 10  # int(args.hidden) of the string default


def test_the_scripts_own_arguments_after_double_dash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wide = one(ARGPARSE, argv=("--batch-size", "256", "--hidden=512", "--no-cuda", "mydata"))
    assert wide.complete and params(wide) == 64 * 512 + 512 + 512 * 10 + 10
    assert any(a.text.startswith("batch_size=256") for a in wide.assumptions)
    script = tmp_path / "train.py"
    script.write_text(ARGPARSE)
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json", "--", "--batch-size", "256", "--hidden", "512"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["peak_bytes"] == wide.peak_bytes


def test_parse_args_rules() -> None:
    parser = configs.Parser()
    from torch_preflight.estimator.values import Qualified

    configs.add_argument(parser, ["--lr"], {"type": Qualified("float"), "default": "0.1"})
    configs.add_argument(parser, ["-b", "--batch-size"], {"type": Qualified("int"), "default": 8})
    configs.add_argument(parser, ["--layers"], {"type": Qualified("int"), "nargs": "+", "default": [1]})
    configs.add_argument(parser, ["--flag"], {"action": "store_false"})
    configs.add_argument(parser, ["--act"], {"type": Qualified("my_type"), "default": "relu"})
    ns, rest = configs.parse_args(parser, ["-b", "32", "--layers", "2", "3", "--flag", "--unknown=1"])
    assert ns.attrs["lr"] == 0.1 and ns.attrs["batch_size"] == 32 and ns.attrs["layers"] == [2, 3]
    assert ns.attrs["flag"] is False and ns.attrs["act"] == "relu" and rest == ["--unknown=1"]


CONFIGURATOR = """\
import sys
from ast import literal_eval
for arg in sys.argv[1:]:
    if '=' not in arg:
        exec(open(arg).read())
    else:
        key, val = arg.split('=')
        key = key[2:]
        if key in globals():
            try:
                attempt = literal_eval(val)
            except (SyntaxError, ValueError):
                attempt = val
            globals()[key] = attempt
        else:
            raise ValueError(f"Unknown config key: {key}")
"""

NANO = """\
import os
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
n_embd = 32
device = 'cuda'
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())
ddp = int(os.environ.get('RANK', -1)) != -1

class Net(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.fc = nn.Linear(n_embd, 10)

    def forward(self, x):
        return self.fc(x)

model = Net(n_embd)
if ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(batch_size, n_embd)
    y = torch.randint(0, 10, (batch_size,))
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def test_an_exec_configurator_reads_its_defaults_and_overrides(tmp_path: Path) -> None:
    (tmp_path / "configurator.py").write_text(CONFIGURATOR)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "small.py").write_text("n_embd = 16\nbatch_size = 2\n")
    script = tmp_path / "train.py"
    script.write_text(NANO)
    default = one(NANO, str(script))
    assert default.complete, default.unknowns
    assert params(default) == 32 * 10 + 10
    small = one(NANO, str(script), argv=("config/small.py", "--batch_size=64", "--device=cpu"))
    assert small.complete and params(small) == 16 * 10 + 10  # the config file, then --key=value on top
    assert small.peak_bytes > one(NANO, str(script), argv=("config/small.py",)).peak_bytes  # batch 64, not 2


MINGPT_CFG = """\
import torch
import torch.nn as nn

class CfgNode:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

class GPT(nn.Module):
    @staticmethod
    def get_default_config():
        C = CfgNode()
        C.n_layer = None
        C.n_embd = None
        return C

    def __init__(self, config):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(config.n_embd, config.n_embd) for _ in range(config.n_layer)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x

def get_config():
    C = CfgNode()
    C.model = GPT.get_default_config()
    C.model.n_layer = 4
    C.model.n_embd = 48
    C.trainer = CfgNode(batch_size=16)
    return C

config = get_config()
model = GPT(config.model)
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    x = torch.randn(config.trainer.batch_size, 48)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
"""


def test_attribute_configs_and_dunder_dict() -> None:
    report = one(MINGPT_CFG)
    assert report.complete, report.unknowns
    assert params(report) == 4 * (48 * 48 + 48)


HELD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(1000, 32)
        self.head = nn.Linear(32, 1000)

    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1)) if targets is not None else None
        return logits, loss

@torch.no_grad()
def evaluate(model):
    for split in ['train', 'val']:
        model(torch.randint(0, 1000, (16, 64)), torch.randint(0, 1000, (16, 64)))

model = LM()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(3):
    evaluate(model)
    x = torch.randint(0, 1000, (16, 64))
    y = torch.randint(0, 1000, (16, 64))
    LOSS_LINE
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_outputs_the_script_holds_stay_live_through_backward() -> None:
    """`logits, loss = model(x, y)` keeps the logits allocated while backward runs (nanoGPT's peak); `loss = model(x, y)[1]`
    lets autograd's references be the only ones. A @torch.no_grad() helper's forwards record nothing."""
    held = one(HELD.replace("LOSS_LINE", "logits, loss = model(x, y)"))
    free = one(HELD.replace("LOSS_LINE", "loss = model(x, y)[1]"))
    assert held.complete and free.complete
    assert held.peak_bytes - free.peak_bytes == 16 * 64 * 1000 * 4  # the logits
    assert held.saved_activation_bytes == free.saved_activation_bytes  # one training forward recorded, not three


def test_token_windows_from_a_memmap(tmp_path: Path) -> None:
    """nanoGPT's get_batch: np.memmap of a token file, windows x[i:i+block] for each of batch_size random offsets."""
    (tmp_path / "train.bin").write_bytes(bytes(2 * 10_000))
    src = """\
    import numpy as np
    import torch
    import torch.nn as nn
    batch_size, block_size = 8, 64
    def get_batch():
        data = np.memmap('train.bin', dtype=np.uint16, mode='r')
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
        return x, y
    model = nn.Embedding(100, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    X, Y = get_batch()
    opt.zero_grad()
    model(X).sum().backward()
    opt.step()
    """
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(src))
    report = one(src, str(script))
    assert report.complete, report.unknowns
    (emb,) = report.layers
    assert emb.output_shape == (8, 64, 16)


def test_reshaping_layers_and_einops() -> None:
    assert reshape.pixel_shuffle((8, 12, 16, 16), 2) == (8, 3, 32, 32)
    assert reshape.pixel_shuffle((8, 3, 32, 32), 2, inverse=True) == (8, 12, 16, 16)
    assert reshape.pixel_shuffle((8, 10, 16, 16), 2) is None
    assert reshape.padded((1, 3, 10, 10), 1, 2) == (1, 3, 12, 12)
    assert reshape.padded((1, 3, 10, 10), (1, 2, 3, 4), 2) == (1, 3, 17, 13)
    assert reshape.rearrange((2, 3, 32, 32), "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", {"p1": 8, "p2": 8}) == (2, 16, 192)
    assert reshape.rearrange((2, 16, 192), "b n d -> b d n", {}) == (2, 192, 16)
    assert reshape.rearrange((2, 15), "b (h w) -> b h w", {"h": 4}) is None  # 15 is not a multiple of 4
    src = """\
    import torch
    import torch.nn as nn
    from einops import rearrange
    from einops.layers.torch import Rearrange

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.pad = nn.ReflectionPad2d(1)
            self.conv = nn.Conv2d(3, 12, 3)
            self.ps = nn.PixelShuffle(2)
            self.patches = Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1=8, p2=8)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            x = self.patches(self.ps(self.conv(self.pad(x))))
            mask = x.eq(0)
            return self.fc(rearrange(x, 'b n d -> b d n'))

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(2, 3, 16, 16)).sum().backward()
        opt.step()
    """
    report = one(src)
    assert report.complete, report.unknowns
    shapes = {layer.name: layer.output_shape for layer in report.layers}
    assert shapes["pad"] == (2, 3, 18, 18) and shapes["ps"] == (2, 3, 32, 32) and shapes["patches"] == (2, 16, 192)
    assert shapes["fc"] == (2, 192, 10)


def test_children_of_a_model_and_a_wrapped_model() -> None:
    src = """\
    import torch
    import torch.nn as nn

    base = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = nn.Sequential(*list(base.children())[:-1])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    """
    report = one(src)
    assert report.complete, report.unknowns
    assert params(report) == 8 * 16 + 16


def test_star_and_relative_imports_of_the_users_package(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .model import *\n")
    (pkg / "parts.py").write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.conv = nn.Conv2d(c, c, 3, padding=1)

            def forward(self, x):
                return self.conv(x)
        """))
    (pkg / "model.py").write_text(textwrap.dedent("""\
        import torch.nn as nn
        from .parts import *
        from .parts import Block as B

        __all__ = ["Net"]

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.b1 = Block(3)
                self.b2 = B(3)
                self.head = nn.Linear(3, 10)

            def forward(self, x):
                return self.head(self.b2(self.b1(x)).mean(dim=(2, 3)))
        """))
    src = textwrap.dedent("""\
        import torch
        from pkg import *

        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(4, 3, 8, 8)).sum().backward()
            opt.step()
        """)
    script = tmp_path / "train.py"
    script.write_text(src)
    report = one(src, str(script))
    assert report.model == "Net" and report.complete, report.unknowns
    assert params(report) == 2 * (3 * 3 * 9 + 3) + 3 * 10 + 10


def test_no_process_imports_torch(tmp_path: Path) -> None:
    """Estimating never imports torch (or torchvision), in this process or any it starts (jedi's included): a fake
    torch package first on the path would leave a marker file if anything imported it."""
    import subprocess
    import sys

    fake = tmp_path / "fake"
    for name in ("torch", "torchvision"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'a').write({name!r})\\n")
    script = tmp_path / "train.py"
    script.write_text("import torchvision\n" + ARGPARSE.replace("import torch.nn as nn", "import torch.nn as nn\nfrom torchvision import models"))
    env = {**__import__("os").environ, "PYTHONPATH": str(fake)}
    proc = subprocess.run([sys.executable, "-m", "torch_preflight", "estimate", str(script), "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode in (0, 3), proc.stderr
    assert "Peak" in proc.stdout
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize(("factory", "count"), [
    ("resnet18", 11_689_512), ("resnet34", 21_797_672), ("resnet50", 25_557_032), ("resnet101", 44_549_160),
    ("vit_b_16", 86_567_656),  # torchvision's published parameter counts
])
def test_library_models_from_the_bundled_catalog(factory: str, count: int) -> None:
    src = f"""\
    import torch
    import torch.nn as nn
    from torchvision import models

    model = models.{factory}(weights=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.randn(2, 3, 224, 224)), torch.randint(0, 1000, (2,))).backward()
        opt.step()
    """
    report = one(src)
    assert report.complete, report.unknowns
    assert params(report) == count
    assert any("catalog of common architectures" in a.text for a in report.assumptions)


def test_a_subclass_of_sequential_is_its_layers() -> None:
    src = """\
    import torch
    import torch.nn as nn

    class MLP(nn.Sequential):
        def __init__(self, d):
            super().__init__(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    model = MLP(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(2, 8)).sum().backward()
        opt.step()
    """
    report = one(src)
    assert report.complete and params(report) == 8 * 32 + 32 + 32 * 8 + 8


LIGHTNING = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(1000, 64), torch.randint(0, 10, (1000,))), batch_size=32)


model = LitModel()
trainer = L.Trainer(max_epochs=1TRAINER_ARGS)
trainer.fit(model)
"""


def test_a_lightning_trainer_owns_the_loop() -> None:
    plain = one(LIGHTNING.replace("TRAINER_ARGS", ""))
    assert plain.complete, plain.unknowns
    assert plain.saved_activation_bytes and plain.breakdown["optimizer_state"] == 2 * (64 * 256 + 256 + 256 * 10 + 10) * 4
    bf16 = one(LIGHTNING.replace("TRAINER_ARGS", ', precision="bf16-mixed"'))
    assert bf16.complete and any("autocast bfloat16" in a.text for a in bf16.assumptions)
    assert bf16.saved_activation_bytes != plain.saved_activation_bytes  # activations in bf16
    accumulate = one(LIGHTNING.replace("TRAINER_ARGS", ", accumulate_grad_batches=4"))
    assert accumulate.complete and accumulate.peak_bytes > plain.peak_bytes  # gradients live through the forward


@pytest.mark.parametrize(("name", "count"), [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168)])  # the hub's counts
def test_hugging_face_gpt2_from_the_catalog(name: str, count: int) -> None:
    src = f"""\
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained("{name}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(2):
        input_ids = torch.randint(0, 50257, (2, 64))
        loss = model(input_ids=input_ids, labels=input_ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
    report = one(src)
    assert report.model == "GPT2LMHeadModel" and report.complete, report.unknowns
    assert params(report) == count


def test_a_vocabulary_read_from_a_corpus_and_the_corpus_tensor_on_cpu(tmp_path: Path) -> None:
    """ng-video-lecture's bigram: the vocabulary is the corpus's characters, the corpus one tensor the script keeps;
    on --device cpu that tensor is part of the peak, on --device cuda it stays in host memory."""
    (tmp_path / "input.txt").write_text("abcdefgh" * 5000)
    src = """\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    with open('input.txt', 'r', encoding='utf-8') as f:
        text = f.read()
    chars = sorted(list(set(text)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    encode = lambda s: [stoi[c] for c in s]
    data = torch.tensor(encode(text), dtype=torch.long)
    def get_batch():
        ix = torch.randint(len(data) - 8, (4,))
        return torch.stack([data[i:i+8] for i in ix]), torch.stack([data[i+1:i+8+1] for i in ix])
    model = nn.Embedding(len(chars), len(chars))
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(2):
        xb, yb = get_batch()
        logits = model(xb)
        loss = F.cross_entropy(logits.view(-1, len(chars)), yb.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    """
    script = tmp_path / "bigram.py"
    script.write_text(textwrap.dedent(src))
    cpu = one(src, str(script))
    assert cpu.complete, cpu.unknowns
    assert params(cpu) == 8 * 8
    (gpu,) = estimate_source(textwrap.dedent(src), str(script), EstimateOptions(device="cuda"))
    assert cpu.breakdown["other"] >= 40_000 * 8 > gpu.breakdown["other"]  # the 320,000-byte corpus: CPU only


def test_a_dataset_class_of_the_script_and_next_iter() -> None:
    src = """\
    import torch
    import torch.nn as nn
    from torch.utils.data import Dataset, DataLoader

    class Windows(Dataset):
        def __init__(self, n, block):
            self.n, self.block = n, block
        def __len__(self):
            return self.n
        def __getitem__(self, idx):
            return torch.zeros(self.block, dtype=torch.long), torch.zeros(self.block, dtype=torch.long)

    model = nn.Embedding(100, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    it = iter(DataLoader(Windows(1000, 32), batch_size=8))
    for _ in range(2):
        x, y = next(it)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    """
    report = one(src)
    assert report.complete, report.unknowns
    assert report.layers[0].output_shape == (8, 32, 16)


def test_a_text_file_read_line_by_line_and_one_past_the_corpus_limit_left_unknown(tmp_path: Path) -> None:
    src = """\
    import torch
    import torch.nn as nn
    from io import open
    vocab = {}
    with open('words.txt', 'r', encoding='utf8') as f:
        for line in f:
            for word in line.split():
                vocab.setdefault(word, len(vocab))
    model = nn.Embedding(len(vocab), 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randint(0, 3, (4, 5))).sum().backward()
        opt.step()
    """
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(src))
    (tmp_path / "words.txt").write_text("a b c\nb c\n")
    short = one(src, str(script))
    assert short.complete and params(short) == 3 * 8, short.unknowns
    # a corpus: more lines than FILE_LINES, every one read (the loop runs compiled)
    (tmp_path / "words.txt").write_text("".join(f"w{i} x\n" for i in range(5000)))
    corpus = one(src, str(script))
    assert corpus.complete and params(corpus) == 5001 * 8, corpus.unknowns
    (tmp_path / "words.txt").write_text("a b c\n" * (CORPUS_BYTES // 6 + 1))  # more than the estimate reads
    long = one(src, str(script))
    assert not long.complete and any("words.txt" in u.text for u in long.unknowns)  # not read, and the estimate says so


ORDER = """\
import torch
import torch.nn as nn
model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
perm = torch.randperm(PERM).tolist()
for _ in range(3):
    x = torch.randn(4, 256)
    ZERO_BEFORE
    loss = model(x).sum()
    ZERO_AFTER
    loss.backward()
    opt.step()
"""


def test_gradients_cleared_after_forward_live_through_it_and_setup_tensors_count_on_cpu() -> None:
    before = one(ORDER.replace("PERM", "10").replace("ZERO_BEFORE", "opt.zero_grad()").replace("ZERO_AFTER", "pass"))
    after = one(ORDER.replace("PERM", "10").replace("ZERO_BEFORE", "pass").replace("ZERO_AFTER", "opt.zero_grad()"))
    grads = (2 * (256 * 256 + 256)) * 4
    assert before.complete and after.complete
    assert after.peak_bytes >= before.peak_bytes and after.phase == "forward" and after.breakdown["gradients"] == grads
    setup = one(ORDER.replace("PERM", "4_000_000").replace("ZERO_BEFORE", "opt.zero_grad()").replace("ZERO_AFTER", "pass"))
    assert setup.phase == "setup" and setup.peak_bytes >= 4_000_000 * 8  # the permutation outweighs this small step
    (gpu,) = estimate_source(ORDER.replace("PERM", "4_000_000").replace("ZERO_BEFORE", "opt.zero_grad()").replace("ZERO_AFTER", "pass"),
                             "train.py", EstimateOptions(device="cuda"))
    assert gpu.phase != "setup"  # a CPU tensor: not on the GPU


HF_TRAINER = """\
import torch.nn as nn
from transformers import Trainer, TrainingArguments


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 100)

    def forward(self, input_ids, labels=None):
        return self.fc(input_ids)


model = Net()
args = TrainingArguments("out", per_device_train_batch_size=4, {settings})
trainer = Trainer(model=model, args=args, train_dataset=None)
trainer.train()
"""


@pytest.mark.parametrize(("settings", "state_per_param"), [
    ("optim='adamw_torch'", 8), ("optim='sgd'", 0), ("optim='adamw_bnb_8bit'", 2), ("weight_decay=0.01", 8),  # default AdamW
])
def test_hugging_face_training_arguments_are_the_steps_settings(settings: str, state_per_param: int) -> None:
    report = one(HF_TRAINER.format(settings=settings))
    n = 100 * 100 + 100
    assert report.breakdown["parameters"] == 4 * n
    assert report.breakdown["optimizer_state"] == state_per_param * n
    # the batches the Trainer collates from a dataset are not modelled: a lower bound, said so
    assert not report.complete
    assert any("Trainer.train: the batches of 4" in u.text for u in report.unknowns), [u.text for u in report.unknowns]


def test_hugging_face_precision_accumulation_and_what_is_not_modelled() -> None:
    report = one(HF_TRAINER.format(settings="gradient_accumulation_steps=4, bf16=True, optim='sgd'"))
    texts = [a.text for a in report.assumptions]
    assert any(t.startswith("bf16=True: autocast bfloat16") for t in texts), texts
    assert any(t.startswith("gradient_accumulation_steps=4") for t in texts), texts
    assert report.breakdown["gradients"] == 4 * (100 * 100 + 100)  # kept between micro-batches, live in forward
    adafactor = one(HF_TRAINER.format(settings="optim='adafactor', gradient_checkpointing=True"))
    unknown = [u.text for u in adafactor.unknowns]
    assert any("optim='adafactor'" in t for t in unknown) and any("gradient_checkpointing" in t for t in unknown), unknown
    assert not any("no optimizer found" in a.text for a in adafactor.assumptions)  # its state is unknown, not zero
