"""Values the script computes from its data at run time: named as unknown, and supplied by the user with
`estimate --set NAME=VALUE` or `set = {...}` in [tool.torch-preflight] (issue 18)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from torch_preflight.core.config import Config, ConfigError, config_from_table
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, configs, estimate_source
from torch_preflight.estimator.scope import CORPUS_BYTES

from torch_preflight.cli import main

# a vocabulary and a token tensor built word by word from a corpus (pytorch/examples' word_language_model)
CORPUS = """\
import torch
import torch.nn as nn


class Dictionary:
    def __init__(self):
        self.word2idx = {}

    def __len__(self):
        return len(self.word2idx)


class Corpus:
    def __init__(self, path):
        self.dictionary = Dictionary()
        self.train = self.tokenize(path)

    def tokenize(self, path):
        idss = []
        with open(path) as f:
            for line in f:
                ids = [self.dictionary.word2idx.setdefault(w, len(self.dictionary.word2idx)) for w in line.split()]
                idss.append(torch.tensor(ids, dtype=torch.int64))
        return torch.cat(idss)


corpus = Corpus('corpus.txt')
ntokens = len(corpus.dictionary)
model = nn.Sequential(nn.Embedding(ntokens, 16), nn.Linear(16, ntokens))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = corpus.train.view(8, -1).t().contiguous()
for i in range(2):
    x = data[i * 10:i * 10 + 10]
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
"""
SUPPLIED = (("ntokens", "1000"), ("train", "torch.empty(40000, dtype=torch.long)"))


def corpus_script(tmp_path: Path, lines: int = CORPUS_BYTES // 16 + 1) -> Path:
    """The script and its corpus of `lines` lines of 16 bytes (by default more than the estimate reads line by line)."""
    script = tmp_path / "train.py"
    script.write_text(CORPUS)
    (tmp_path / "corpus.txt").write_text("a b c d e f g h\n" * lines)
    return script


def estimate(script: Path, values: tuple[tuple[str, str], ...] = ()) -> MemoryReport:
    (report,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu", values=values))
    return report


def test_a_value_built_from_the_data_is_unknown_by_name_with_how_to_supply_it(tmp_path: Path) -> None:
    report = estimate(corpus_script(tmp_path))
    assert not report.complete
    texts = [u.text for u in report.unknowns]
    assert any(f"`corpus.txt` is read line by line at run time ({CORPUS_BYTES // 16 + 1:,} lines" in t for t in texts), texts
    assert any("nn.Embedding" in t and "`ntokens = len(corpus.dictionary)` at train.py:28" in t
               and "--set ntokens=VALUE" in t for t in texts), texts


def test_supplied_values_bind_at_their_assignments_and_complete_the_estimate(tmp_path: Path) -> None:
    report = estimate(corpus_script(tmp_path), SUPPLIED)
    assert report.complete, report.unknowns
    assert sum(layer.params for layer in report.layers) == 1000 * 16 + 16 * 1000 + 1000
    # a supplied tensor is data the script keeps on the CPU: it and its contiguous copy (`data`) are in the peak
    assert report.breakdown["other"] >= 2 * 40000 * 8
    texts = [a.text for a in report.assumptions]
    assert any(t.startswith("`ntokens` = 1000 (supplied) instead of `len(corpus.dictionary)`") for t in texts), texts
    assert any(t.startswith("`train` = torch.empty(40000, dtype=torch.long) (supplied)") for t in texts), texts
    # a dotted target names one attribute assignment exactly
    dotted = estimate(corpus_script(tmp_path), (("ntokens", "1000"), ("self.train", "torch.empty(40000, dtype=torch.long)")))
    assert dotted.peak_bytes == report.peak_bytes


def test_a_corpus_the_estimate_reads_gives_what_supplying_its_values_gives(tmp_path: Path) -> None:
    # 5,000 lines (more than FILE_LINES): the vocabulary and the token tensor are read word by word, compiled
    script = corpus_script(tmp_path, lines=5000)
    read = estimate(script)
    assert read.complete, read.unknowns
    supplied = estimate(script, (("ntokens", "8"), ("train", "torch.empty(40000, dtype=torch.long)")))
    assert read.peak_bytes == supplied.peak_bytes and read.breakdown == supplied.breakdown
    assert sum(layer.params for layer in read.layers) == 8 * 16 + 16 * 8 + 8
    # the editor's and `check`'s estimate (from the configuration), run on every change, reads no corpus: unknown
    (editor,) = estimate_source(script.read_text(), str(script), Config())
    assert not editor.complete and any("`corpus.txt` is read line by line" in u.text for u in editor.unknowns)


def test_supplied_value_syntax() -> None:
    assert configs.parse_supplied("ntokens=33278") == ("ntokens", "33278")
    assert configs.parse_supplied(" self.train = torch.empty(3) ") == ("self.train", "torch.empty(3)")
    for bad in ("ntokens", "=3", "a-b=3", "x="):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            configs.parse_supplied(bad)
    assert configs.supplied_value("33278") == 33278
    assert configs.supplied_value("(3, 224, 224)") == (3, 224, 224)
    assert configs.supplied_value("gpt2") == "gpt2"  # not a literal, not a call: the text
    assert configs.supplied_value("torch.empty(4)").__class__.__name__ == "Call"


def test_set_on_the_command_line_and_in_pyproject(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = corpus_script(tmp_path)
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json"]) == 3
    capsys.readouterr()
    args = ["--set", "ntokens=1000", "--set", "train=torch.empty(40000, dtype=torch.long)"]
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json", *args]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["complete"] and model["peak_bytes"] == estimate(script, SUPPLIED).peak_bytes
    (tmp_path / "pyproject.toml").write_text(
        '[tool.torch-preflight]\nset = {ntokens = 1000, train = "torch.empty(40000, dtype=torch.long)"}\n')
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"][0]["peak_bytes"] == model["peak_bytes"]
    # the command line wins over pyproject.toml
    assert main(["estimate", str(script), "--device", "cpu", "--format", "json", "--set", "ntokens=2000"]) == 0
    (wider,) = json.loads(capsys.readouterr().out)["models"]
    assert wider["peak_bytes"] > model["peak_bytes"]
    assert main(["estimate", str(script), "--set", "ntokens"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


def test_set_in_the_configuration_table() -> None:
    config = config_from_table({"set": {"ntokens": 33278, "dropout": 0.1, "name": "gpt2"}})
    assert config.values == (("ntokens", "33278"), ("dropout", "0.1"), ("name", "gpt2"))
    with pytest.raises(ConfigError, match="set = "):
        config_from_table({"set": ["ntokens=3"]})


def test_a_model_the_script_saved_loads_back_as_that_model() -> None:
    src = """\
    import torch
    import torch.nn as nn
    model = nn.LSTM(16, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        out, _ = model(torch.randn(5, 4, 16))
        out.sum().backward()
        opt.step()
    with open('model.pt', 'wb') as f:
        torch.save(model, f)
    with open('model.pt', 'rb') as f:
        model = torch.load(f)
        model.flatten_parameters()
    with torch.no_grad():
        model(torch.randn(5, 4, 16))
    """
    (report,) = estimate_source(textwrap.dedent(src), "train.py", EstimateOptions(device="cpu"))
    assert report.complete, report.unknowns
    other = textwrap.dedent(src).replace("torch.load(f)", "torch.load('other.pt')")
    (unknown,) = estimate_source(other, "train.py", EstimateOptions(device="cpu"))
    assert not unknown.complete  # a file the script did not save is read at run time


HF_CHECKPOINTING = """\
import torch
from transformers import AutoConfig, AutoModelForCausalLM

config = AutoConfig.from_pretrained("gpt2", n_layer=4)
model = AutoModelForCausalLM.from_config(config)
ENABLE
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for _ in range(2):
    x = torch.randint(0, 50257, (4, 256))
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_hugging_face_gradient_checkpointing_keeps_only_block_inputs() -> None:
    def run(enable: str) -> MemoryReport:
        (report,) = estimate_source(HF_CHECKPOINTING.replace("ENABLE", enable), "train.py", EstimateOptions(device="cpu"))
        assert report.complete, report.unknowns
        return report

    plain, checkpointed = run(""), run("model.gradient_checkpointing_enable()")
    assert checkpointed.breakdown["parameters"] == plain.breakdown["parameters"]
    # 4 blocks of 4 x 256 x 768: each keeps its input; the rest is recomputed block by block in backward
    assert checkpointed.peak_bytes < plain.peak_bytes - 4 * 256 * 768 * 4 * 4 * 8


def test_training_arguments_gradient_checkpointing_enables_it_on_a_hugging_face_model() -> None:
    src = """\
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    model = AutoModelForCausalLM.from_pretrained("distilgpt2")
    args = TrainingArguments("out", per_device_train_batch_size=4, gradient_checkpointing=True)
    Trainer(model=model, args=args, train_dataset=None).train()
    """
    (report,) = estimate_source(textwrap.dedent(src), "train.py", EstimateOptions(device="cpu"))
    assert any(a.text.startswith("gradient_checkpointing=True: model.gradient_checkpointing_enable()") for a in report.assumptions)
    assert not any("gradient_checkpointing" in u.text for u in report.unknowns), report.unknowns


def test_the_editors_estimate_takes_the_configurations_values(tmp_path: Path) -> None:
    script = corpus_script(tmp_path)
    config = config_from_table({"set": {"ntokens": 1000, "train": "torch.empty(40000, dtype=torch.long)"}})
    (report,) = estimate_source(script.read_text(), str(script), config)  # a Config, as the language server passes it
    assert report.complete and sum(layer.params for layer in report.layers) == 1000 * 16 + 16 * 1000 + 1000


def test_the_text_report_prints_brackets_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(CORPUS.replace("ntokens = len(corpus.dictionary)", "ntokens = [len(corpus.dictionary)][i]"))
    main(["estimate", str(script), "--device", "cpu", "--set", "ntokens=1000", "--set", "train=torch.empty(40000)"])
    assert "instead of `[len(corpus.dictionary)][i]`" in capsys.readouterr().out  # not read as rich markup


def test_on_the_cpu_data_kept_in_an_objects_attributes_and_its_copies_count() -> None:
    src = """\
    import torch
    import torch.nn as nn

    class Holder:
        def __init__(self):
            self.train = torch.zeros(1000000, dtype=torch.long)

    h = Holder()
    data = h.train.view(100, -1).t().contiguous()
    model = nn.Linear(10, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(2):
        loss = model(torch.randn(4, 10)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    """
    (report,) = estimate_source(textwrap.dedent(src), "train.py", EstimateOptions(device="cpu"))
    assert report.complete and report.peak_bytes >= 2 * 8_000_000  # h.train and its contiguous copy are both live
