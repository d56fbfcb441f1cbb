"""Values a script loads from data files of the project, read statically (issue 18): torch.load of torch's zip and
legacy formats, np.load of .npy/.npz, np.fromfile and pickle.load, through a symbolic pickle reader that executes
nothing. The files are written here by the dev venv's torch and numpy (skipped without them)."""

from __future__ import annotations

import io
import os
import pickle
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest
from torch_preflight.core.memory import MemoryReport
from torch_preflight.estimator import EstimateOptions, datafiles, estimate_source, pickled
from torch_preflight.estimator.values import Tensor, Unknown


def read(name: str, path: Path, **kwargs: Any) -> Any:
    return datafiles.read_call(name, [str(path)], kwargs, str(path.parent))


def shape(value: Any) -> tuple[tuple[int, ...], str, bool]:
    assert isinstance(value, Tensor), value
    return value.shape, value.dtype, value.host


class Hostile:
    """Unpickling this runs a shell command: the reader must only record it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_hostile_pickle_is_recorded_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    data = pickle.dumps({"x": Hostile(marker), "n": 3})
    loaded = pickled.load(io.BytesIO(data))
    assert loaded["n"] == 3
    call = loaded["x"]
    assert isinstance(call, pickled.Call) and call.name in ("posix.system", "os.system", "nt.system")
    assert call.args == (f"touch {marker}",)
    (tmp_path / "evil.pkl").write_bytes(data)
    value = read("pickle.load", tmp_path / "evil.pkl")
    assert value["n"] == 3 and isinstance(value["x"], Unknown) and "system(...)" in value["x"].reason
    assert not marker.exists()


def test_malformed_and_foreign_files_are_unknown_with_the_reason(tmp_path: Path) -> None:
    data = {"a": [1, 2.5, "s", None, True, (1, 2), 2**70, -3, b"xy"], "b": {1: frozenset({2})}, (1, "k"): {"z"}}
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickled.load(io.BytesIO(pickle.dumps(data, protocol=protocol))) == data, protocol
    good = pickle.dumps(data, protocol=4)
    (tmp_path / "cut.pkl").write_bytes(good[:-1])  # no STOP
    (tmp_path / "text.pt").write_text("not a pickle at all")
    cut = read("pickle.load", tmp_path / "cut.pkl")
    assert isinstance(cut, Unknown) and cut.reason.startswith("pickle.load(") and "ends before its STOP" in cut.reason
    for end in range(1, len(good) - 1):  # cut anywhere: a clear error, never an exception
        with pytest.raises(pickled.PickleError):
            pickled.load(io.BytesIO(good[:end]))
    foreign = read("torch.load", tmp_path / "text.pt")
    assert isinstance(foreign, Unknown) and foreign.reason.startswith("torch.load(")
    (tmp_path / "short.npy").write_bytes(b"\x93NUMPY\x01\x00\x10")  # cut inside the header's length
    (tmp_path / "huge.npy").write_bytes(b"\x93NUMPY\x02\x00" + (1 << 30).to_bytes(4, "little"))
    for name in ("short.npy", "huge.npy"):
        broken = read("numpy.load", tmp_path / name)
        assert isinstance(broken, Unknown) and broken.reason.startswith("numpy.load("), broken
    missing = read("torch.load", tmp_path / "absent.pt")
    assert isinstance(missing, Unknown) and "a file read at run time" in missing.reason
    assert isinstance(datafiles.read_call("torch.load", [Unknown()], {}, str(tmp_path)), Unknown)


def test_a_corrupted_pickle_is_a_clear_error_never_another_exception() -> None:
    rng = random.Random(0)
    base = pickle.dumps({"a": [1, 2.5, "s", None, (1, 2)], "b": {1: frozenset({2})}}, protocol=2)
    base += pickle.dumps([b"x" * 10, 2**80, {"k": "v"}], protocol=5)[2:]  # more opcodes (FRAME, BINBYTES8-sized lengths)
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            pickled.load(io.BytesIO(bytes(data)))
        except pickled.PickleError:
            pass


class Counting(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, n: int | None = -1) -> bytes:
        out = super().read(n)
        self.bytes_read += len(out)
        return out


def test_a_large_payload_is_seeked_over_not_read() -> None:
    f = Counting(pickle.dumps({"data": b"\0" * 5_000_000, "text": "é" * 3_000_000, "small": b"ab"}, protocol=4))
    loaded = pickled.load(f)
    assert loaded["small"] == b"ab"
    assert isinstance(loaded["data"], pickled.Skipped) and loaded["data"].size == 5_000_000
    assert isinstance(loaded["text"], pickled.Skipped) and loaded["text"].kind == "str"
    assert f.bytes_read < 1000


def test_torch_zip_format_state_dict_shared_storage_and_views(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    base = torch.zeros(4, 5, dtype=torch.float64)
    obj = {"sd": torch.nn.Linear(3, 2).state_dict(), "x": base[1:], "t": base.t(), "n": 7,
           "p": torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16)), "ids": [torch.arange(6, dtype=torch.long)]}
    torch.save(obj, tmp_path / "a.pt")
    value = read("torch.load", tmp_path / "a.pt")
    assert shape(value["sd"]["weight"]) == ((2, 3), "float32", False)
    assert shape(value["sd"]["bias"]) == ((2,), "float32", False)
    assert shape(value["x"]) == ((3, 5), "float64", False) and value["x"].contiguous
    assert shape(value["t"]) == ((5, 4), "float64", False) and not value["t"].contiguous
    assert value["x"].storage is value["t"].storage and value["x"].storage.nbytes == 4 * 5 * 8  # the whole storage loads
    assert shape(value["p"]) == ((2,), "bfloat16", False)
    assert shape(value["ids"][0]) == ((6,), "int64", False)
    assert value["n"] == 7
    torch.save(base, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    assert shape(read("torch.load", tmp_path / "legacy.pt")) == ((4, 5), "float64", False)
    marker = tmp_path / "ran"
    torch.save({"x": base, "evil": Hostile(marker)}, tmp_path / "evil.pt")  # data.pkl REDUCEs os.system
    evil = read("torch.load", tmp_path / "evil.pt")
    assert shape(evil["x"]) == ((4, 5), "float64", False) and isinstance(evil["evil"], Unknown)
    assert not marker.exists()


def test_numpy_arrays_pickled_saved_and_raw(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    arr = np.zeros((100, 1000), dtype=np.float64)
    np.save(tmp_path / "a.npy", arr.astype(np.float32))
    np.savez(tmp_path / "b.npz", x=arr[:, :3], y=np.zeros(7, dtype=np.uint8))
    arr[:10].astype(np.uint16).tofile(tmp_path / "tokens.bin")
    with open(tmp_path / "c.pkl", "wb") as f:
        pickle.dump({"data": np.zeros((6, 3072), dtype=np.uint8), "labels": [1, 2], "vocab_size": np.int64(65)}, f, protocol=2)
    assert shape(read("numpy.load", tmp_path / "a.npy")) == ((100, 1000), "float32", True)
    npz = read("numpy.load", tmp_path / "b.npz")
    assert shape(npz["x"]) == ((100, 3), "float64", True) and shape(npz["y"]) == ((7,), "uint8", True)
    assert shape(datafiles.read_call("numpy.fromfile", [str(tmp_path / "tokens.bin")], {"dtype": "uint16"}, "/")) == (
        (10_000,), "uint16", True)
    value = read("pickle.load", tmp_path / "c.pkl")
    assert shape(value["data"]) == ((6, 3072), "uint8", True) and value["labels"] == [1, 2]
    assert value["vocab_size"] == 65 and isinstance(value["vocab_size"], int)
    # np.load of a pickle needs allow_pickle, as numpy's own
    assert isinstance(read("numpy.load", tmp_path / "c.pkl"), Unknown)
    assert shape(read("numpy.load", tmp_path / "c.pkl", allow_pickle=True)["data"]) == ((6, 3072), "uint8", True)
    torch = pytest.importorskip("torch")
    torch.save(arr, tmp_path / "traindata.pt")  # pytorch/examples' time_sequence_prediction: an ndarray in torch.save
    assert shape(read("torch.load", tmp_path / "traindata.pt")) == ((100, 1000), "float64", True)
    # the array's 800 kB inside data.pkl are seeked over in the file, not read (nor read through by zipfile)
    f = Counting((tmp_path / "traindata.pt").read_bytes())
    assert shape(datafiles.torch_file(f, "torch.load")) == ((100, 1000), "float64", True)
    assert f.bytes_read < 20_000, f.bytes_read
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    assert isinstance(read("numpy.load", tmp_path / "objects.npy"), Unknown)


TRAIN = """\
import pickle
import torch
import torch.nn as nn
import numpy as np

{load}
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, {classes}))
opt = torch.optim.Adam(model.parameters())
for step in range(2):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
"""


def estimate(tmp_path: Path, load: str, classes: str = "5") -> MemoryReport:
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(load=textwrap.dedent(load), classes=classes))
    (report,) = estimate_source(script.read_text(), str(script), EstimateOptions(device="cpu"))
    return report


def test_a_script_that_loads_its_training_data_is_estimated_completely(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"x": torch.zeros(512, 20), "y": torch.zeros(512, dtype=torch.long)}, tmp_path / "traindata.pt")
    loaded = estimate(tmp_path, "data = torch.load('traindata.pt')\nx, y = data['x'], data['y']")
    assert loaded.complete, loaded.unknowns
    assert [layer.output_shape for layer in loaded.layers if layer.type == "Linear"] == [(512, 64), (512, 5)]
    built = estimate(tmp_path, "x, y = torch.zeros(512, 20), torch.zeros(512, dtype=torch.long)")
    assert loaded.peak_bytes == built.peak_bytes
    # the estimate says it rests on the file as it is now
    assert ("torch.load('traindata.pt') read from the file as it is now: a dict of 2 items (2 arrays or tensors) from "
            "train.py:6", 5) in [(a.text, a.line) for a in loaded.assumptions], loaded.assumptions
    # a vocabulary size the script pickles beside its arrays (numpy's, in numpy's memory)
    np = pytest.importorskip("numpy")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"classes": np.int64(9), "x": np.zeros((512, 20), dtype=np.float32)}, f)
    meta = estimate(tmp_path, "with open('meta.pkl', 'rb') as f:\n    meta = pickle.load(f)\n"
                              "x = torch.from_numpy(meta['x'])\ny = torch.zeros(512, dtype=torch.long)", "meta['classes']")
    assert meta.complete, meta.unknowns
    assert [layer.output_shape for layer in meta.layers if layer.type == "Linear"] == [(512, 64), (512, 9)]


def test_what_a_file_does_not_hold_as_data_stays_unknown_by_name(tmp_path: Path) -> None:
    with open(tmp_path / "data.pkl", "wb") as f:
        pickle.dump({"x": Hostile(tmp_path / "ran")}, f)
    report = estimate(tmp_path, "with open('data.pkl', 'rb') as f:\n    data = pickle.load(f)\n"
                                "x = data['x']\ny = torch.zeros(512, dtype=torch.long)")
    assert not report.complete
    # named where it is read, with what the file holds and what to supply
    assert any(u.text.startswith("input of Linear is not a known tensor (`x = data['x']` at train.py:8 is not known "
                                 "statically (pickle.load('data.pkl'): `") and "system(...)` is not read statically); supply "
               "it with --set x=VALUE" in u.text for u in report.unknowns), report.unknowns
    assert not (tmp_path / "ran").exists()
    absent = estimate(tmp_path, "data = torch.load('absent.pt')\nx, y = data['x'], data['y']")
    assert not absent.complete
    assert any("`data = torch.load('absent.pt')` at train.py:6 is not known statically; supply it with --set data=VALUE"
               in u.text for u in absent.unknowns), absent.unknowns
    # a file that is there but is no torch file: why, beside what to supply
    foreign = estimate(tmp_path, "data = torch.load('data.pkl')\nx, y = data['x'], data['y']")
    assert any("not known statically (torch.load('data.pkl'): not a file torch.save wrote); supply it with --set data=VALUE"
               in u.text for u in foreign.unknowns), foreign.unknowns
