"""Hugging Face data as the Trainer batches it: tokenizers, `datasets` and their `map`, and the data collators.

A row of tokens has a length the estimate can know only when the tokenizer pads every row to it
(`tokenizer(text, max_length=N, padding="max_length", truncation=True)`); otherwise (padding to the longest row of a
batch, no padding, rows grouped by a function of the whole text) the length depends on the text and is Unknown, with
the reason. The Trainer's batch is then `per_device_train_batch_size` rows of each column the model takes.
"""

from __future__ import annotations

from typing import Any

from torch_preflight.estimator.values import Obj, Qualified, Tensor, Unknown, is_unknown

# the columns a Hugging Face model takes from a batch (the Trainer drops the others, such as the text)
MODEL_COLUMNS = ("input_ids", "attention_mask", "token_type_ids", "labels", "position_ids")
DATASET_SAME = {"shuffle", "select", "remove_columns", "with_format", "set_format", "filter", "flatten_indices", "train_test_split"}


def tokenizer_call(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What `tokenizer(texts, ...)` returns for rows of text: columns of rows whose length is known when every row is
    padded to `max_length`."""
    length = kwargs.get("max_length")
    padded = kwargs.get("padding") == "max_length" and isinstance(length, int) and not isinstance(length, bool)
    column: Any = Obj("token_rows", {"length": length}) if padded else Unknown(
        "the length of the tokenized rows (it depends on the text unless the tokenizer pads them: "
        "padding=\"max_length\", max_length=N)")
    return {"input_ids": column, "attention_mask": column}


def dataset_map(result: Any) -> Obj:
    """`dataset.map(fn, ...)`: the columns `fn` returns for a batch of rows (the function was run on unread rows)."""
    if not isinstance(result, dict):
        return Obj("hf_dataset", {"columns": Unknown("the rows `map` makes (its function's result is not known)")})
    return Obj("hf_dataset", {"columns": {str(k): v for k, v in result.items()}})


def trainer_batch(dataset: Any, collator: Any, batch_size: int) -> dict[str, Tensor] | Unknown:
    """The keyword arguments the Trainer passes the model: `batch_size` rows of each model column, and `labels` copied
    from `input_ids` by a causal-LM collator (`DataCollatorForLanguageModeling(tokenizer, mlm=False)`)."""
    if isinstance(collator, Qualified) and collator.name.endswith("default_data_collator"):
        collator = None
    if not isinstance(dataset, Obj) or dataset.type != "hf_dataset":
        return Unknown("the training dataset's rows")
    columns = dataset.attrs.get("columns")
    if is_unknown(columns) or not isinstance(columns, dict):
        return columns if isinstance(columns, Unknown) else Unknown("the training dataset's rows")
    batch: dict[str, Tensor] = {}
    for name, column in columns.items():
        if name not in MODEL_COLUMNS:
            continue
        if not (isinstance(column, Obj) and column.type == "token_rows"):
            return column if isinstance(column, Unknown) else Unknown(f"the length of the dataset's `{name}` rows")
        batch[name] = Tensor((batch_size, column.attrs["length"]), "int64", external=True)
    if "input_ids" not in batch:
        return Unknown("the training dataset's `input_ids`")
    if isinstance(collator, Obj) and collator.type == "lm_collator" and collator.attrs.get("mlm") is False:
        batch["labels"] = Tensor(batch["input_ids"].shape, "int64", external=True)
    elif collator is not None and not (isinstance(collator, Obj) and collator.type == "lm_collator"):
        return Unknown("what the Trainer's data_collator makes of the rows")
    elif isinstance(collator, Obj) and collator.attrs.get("mlm") is not False:
        return Unknown("a masked-LM collator's batch (mlm=True)")
    return batch
