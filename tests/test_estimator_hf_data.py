"""Hugging Face's Trainer on a tokenized `datasets` dataset: the batch it collates (rows padded to max_length, labels
from a causal-LM collator) runs as the step; a row length that depends on the text is unknown by name (issue 18)."""

from __future__ import annotations

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, estimate_source, hf_data
from torch_preflight.estimator.values import Obj

SCRIPT = """\
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainingArguments

tokenizer = AutoTokenizer.from_pretrained("distilgpt2")
tokenizer.pad_token = tokenizer.eos_token
raw = load_dataset("wikitext", "wikitext-2-raw-v1")


def tokenize(examples):
    return tokenizer(examples["text"], truncation=True, TOKENIZE)


tokenized = raw.map(tokenize, batched=True, remove_columns=["text"])
model = AutoModelForCausalLM.from_pretrained("distilgpt2")
args = TrainingArguments("out", per_device_train_batch_size=4, ARGS)
trainer = Trainer(model=model, args=args, train_dataset=tokenized["train"],
                  data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
trainer.train()
"""
PADDED = 'max_length=128, padding="max_length"'


def estimate(tokenize: str = PADDED, args: str = "bf16=False") -> MemoryReport:
    src = SCRIPT.replace("TOKENIZE", tokenize).replace("ARGS", args)
    (report,) = estimate_source(src, "train.py", EstimateOptions(device="cpu"))
    return report


def test_rows_padded_to_max_length_are_the_trainers_batch() -> None:
    report = estimate()
    assert report.complete, report.unknowns
    assert any(a.text.startswith("batch_size=4, rows of 128 tokens: input_ids, attention_mask, labels")
               for a in report.assumptions), report.assumptions
    assert report.saved_activation_bytes > 4 * 128 * 50257 * 4  # the logits of the step's batch
    longer = estimate('max_length=256, padding="max_length"')
    assert longer.saved_activation_bytes > 1.9 * report.saved_activation_bytes


def test_gradient_checkpointing_in_the_training_arguments() -> None:
    plain, checkpointed = estimate(), estimate(args="gradient_checkpointing=True")
    assert checkpointed.complete, checkpointed.unknowns
    assert any(a.text.startswith("gradient_checkpointing=True") for a in checkpointed.assumptions)
    assert checkpointed.peak_bytes <= plain.peak_bytes


@pytest.mark.parametrize("tokenize", ["padding=True", "max_length=128", 'padding="longest", max_length=128'])
def test_a_row_length_that_depends_on_the_text_is_unknown(tokenize: str) -> None:
    report = estimate(tokenize)
    assert not report.complete
    assert any("the length of the tokenized rows" in u.text and 'padding="max_length"' in u.text for u in report.unknowns)


def test_collators() -> None:
    rows = Obj("hf_dataset", {"columns": hf_data.tokenizer_call({"max_length": 64, "padding": "max_length"})})
    plain = hf_data.trainer_batch(rows, None, 8)
    assert isinstance(plain, dict) and set(plain) == {"input_ids", "attention_mask"} and plain["input_ids"].shape == (8, 64)
    lm = hf_data.trainer_batch(rows, Obj("lm_collator", {"mlm": False}), 8)
    assert isinstance(lm, dict) and lm["labels"].shape == (8, 64)
    assert not isinstance(hf_data.trainer_batch(rows, Obj("lm_collator", {"mlm": True}), 8), dict)  # masking: not modelled
