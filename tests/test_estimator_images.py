"""Images, folders and paths a script's dataset reads, read statically (issue 18): image sizes and modes from the
files' headers (no pixel decoded, PIL never imported by the product), `os.listdir`, `pathlib.Path.glob`,
`Image.open(...).resize(...)`, `np.asarray(img)`. The images are written here with the dev venv's PIL and numpy."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import Any

import pytest
from torch_preflight.estimator import EstimateOptions, estimate_source, images, project_files
from torch_preflight.estimator.values import Obj, Tensor, Unknown

FORMATS = [("RGB", "jpg"), ("L", "jpg"), ("CMYK", "jpg"), ("RGB", "png"), ("L", "png"), ("RGBA", "png"), ("P", "png"),
           ("1", "png"), ("LA", "png"), ("I;16", "png"), ("L", "gif"), ("RGB", "bmp")]


@pytest.mark.parametrize(("mode", "ext"), FORMATS)
def test_headers_give_what_pil_opens(tmp_path: Path, mode: str, ext: str) -> None:
    np = pytest.importorskip("numpy")
    image_mod = pytest.importorskip("PIL.Image")
    path = tmp_path / f"a.{ext}"
    image_mod.fromarray(np.zeros((37, 53, 3), dtype=np.uint8)).convert(mode).save(path)
    opened = image_mod.open(path)
    with open(path, "rb") as f:
        header = images.image_header(f)
    assert header is not None and header[:2] == opened.size == (53, 37)
    array = np.asarray(opened)
    assert images.array_shape(header[:2], header[2]) == (array.shape, str(array.dtype))


def test_a_jpeg_frame_header_after_large_segments_and_progressive(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    image_mod = pytest.importorskip("PIL.Image")
    image = image_mod.fromarray(np.zeros((20, 30, 3), dtype=np.uint8))
    image.save(tmp_path / "p.jpg", progressive=True, exif=b"Exif\0\0" + b"\0" * 60_000)
    data = (tmp_path / "p.jpg").read_bytes()

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, n: int | None = -1) -> bytes:
            out = super().read(n)
            self.read_bytes += len(out)
            return out

    f = Counting(data)
    assert images.image_header(f) == (30, 20, "RGB")
    assert f.read_bytes < 200  # the segments' lengths are followed, their content seeked over
    assert images.image_header(io.BytesIO(b"\xff\xd8\xff\xe0\x00")) is None  # cut inside a segment
    assert images.image_header(io.BytesIO(b"not an image")) is None
    assert images.array_shape((3, 2), "XYZ") is None


def test_folders_paths_and_images_of_the_project(tmp_path: Path) -> None:
    write_images(tmp_path / "imgs", {name: (8, 12, 3) for name in ("b.png", "a.png", "c_mask.gif")})
    base = str(tmp_path)
    assert project_files.call("os.listdir", ["imgs"], {}, base) == ["a.png", "b.png", "c_mask.gif"]
    folder = project_files.call("pathlib.Path", ["imgs/"], {}, base)
    assert isinstance(folder, Obj) and folder.attrs["path"] == "imgs" and project_files.fspath(folder) == "imgs"
    found = project_files.method(folder, "glob", ["*.png"], {}, base)
    assert [p.attrs["name"] for p in found] == ["a.png", "b.png"] and found[0].attrs["stem"] == "a"
    assert project_files.method(folder, "is_dir", [], {}, base) is True
    image = project_files.call("PIL.Image.open", [found[0]], {}, base)
    assert image.attrs["size"] == (12, 8) and image.attrs["mode"] == "RGB"
    small = project_files.method(image, "resize", [(6, 4)], {}, base)
    gray = project_files.method(small, "convert", ["L"], {}, base)
    as_array: Any = project_files.numpy_call("asarray", [small], {})
    assert isinstance(as_array, Tensor) and (as_array.shape, as_array.dtype, as_array.host) == ((4, 6, 3), "uint8", True)
    assert project_files.numpy_call("array", [gray], {}).shape == (4, 6)
    chw = project_files.numpy_method(as_array, "transpose", [(2, 0, 1)])
    assert chw.shape == (3, 4, 6) and not chw.contiguous
    for missing in (project_files.call("PIL.Image.open", ["imgs/none.png"], {}, base),
                    project_files.call("os.listdir", ["nowhere"], {}, base),
                    project_files.method(image, "resize", [(0, 4)], {}, base)):
        assert isinstance(missing, Unknown) and missing.reason


def test_numpy_methods_only_where_torch_has_none() -> None:
    torch_tensor = Tensor((2, 3, 4), "float32")
    assert not project_files.numpy_only(torch_tensor, "transpose", [0, 1])  # torch's swap of two axes
    assert project_files.numpy_only(torch_tensor, "transpose", [(2, 0, 1)])
    assert project_files.numpy_only(torch_tensor, "copy", [])
    assert project_files.numpy_only(Tensor((2, 3), "uint8", host=True), "transpose", [1, 0])


DATASET = """\
import os
from pathlib import Path
import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, root, scale):
        self.root = Path(root)
        self.ids = sorted(os.path.splitext(f)[0] for f in os.listdir(root) if f.endswith('.jpg'))
        self.scale = scale

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        img = Image.open(list(self.root.glob(self.ids[idx] + '.*'))[0]).convert('RGB')
        mask = Image.open(os.path.join(self.root, self.ids[idx] + '_mask.gif'))
        w, h = img.size
        img = img.resize((int(w * self.scale), int(h * self.scale)))
        mask = mask.resize((int(w * self.scale), int(h * self.scale)))
        x = np.asarray(img).transpose((2, 0, 1)) / 255.0
        y = np.zeros((int(h * self.scale), int(w * self.scale)), dtype=np.int64)
        y[np.asarray(mask) > 0] = 1
        return torch.as_tensor(x.copy()).float(), torch.as_tensor(y.copy()).long()


model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(Images('data/imgs', 0.5), batch_size=4, shuffle=True)
for x, y in loader:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def write_images(folder: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Black images of these shapes (H, W[, 3]) under these names, written by the dev venv's PIL."""
    np = pytest.importorskip("numpy")
    image_mod = pytest.importorskip("PIL.Image")
    folder.mkdir(parents=True, exist_ok=True)
    for name, shape in shapes.items():
        image_mod.fromarray(np.zeros(shape, dtype=np.uint8)).save(folder / name)


def test_a_dataset_of_image_files_gives_its_samples_shape(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "imgs"
    write_images(folder, {n: s for i in range(3) for n, s in ((f"c{i}.jpg", (96, 128, 3)), (f"c{i}_mask.gif", (96, 128)))})
    script = tmp_path / "train.py"
    script.write_text(DATASET)
    (report,) = estimate_source(textwrap.dedent(DATASET), str(script), EstimateOptions(device="cpu"))
    assert report.complete, report.unknowns
    assert any(a.text.startswith("Images samples: 3x48x64, 48x64, as __getitem__(0) builds them") for a in report.assumptions)
    assert [layer.output_shape for layer in report.layers] == [(4, 16, 48, 64), (4, 16, 48, 64), (4, 2, 48, 64)]
    # without its images the samples are unknown, by name
    for path in folder.iterdir():
        path.unlink()
    (empty,) = estimate_source(textwrap.dedent(DATASET), str(script), EstimateOptions(device="cpu"))
    assert not empty.complete


# Pytorch-UNet's idioms: a dict sample, a @staticmethod preprocess called through self, random_split, Path folders,
# the dataset's len() (its __len__)
UNET_LIKE = """\
from os import listdir
from os.path import isfile, join, splitext
from pathlib import Path
import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from torch.utils.data import DataLoader, Dataset, random_split


class Basic(Dataset):
    def __init__(self, images_dir, scale):
        self.images_dir = Path(images_dir)
        self.scale = scale
        self.ids = [splitext(f)[0] for f in listdir(images_dir) if isfile(join(images_dir, f)) and not f.startswith('.')]

    def __len__(self):
        return len(self.ids)

    @staticmethod
    def preprocess(pil_img, scale, is_mask):
        w, h = pil_img.size
        pil_img = pil_img.resize((int(scale * w), int(scale * h)), resample=Image.NEAREST if is_mask else Image.BICUBIC)
        img = np.asarray(pil_img)
        if is_mask:
            return np.zeros((int(scale * h), int(scale * w)), dtype=np.int64)
        img = img[np.newaxis, ...] if img.ndim == 2 else img.transpose((2, 0, 1))
        return img / 255.0

    def __getitem__(self, idx):
        img = Image.open(list(self.images_dir.glob(self.ids[idx] + '.*'))[0])
        return {
            'image': torch.as_tensor(self.preprocess(img, self.scale, is_mask=False).copy()).float().contiguous(),
            'mask': torch.as_tensor(self.preprocess(img, self.scale, is_mask=True).copy()).long().contiguous(),
        }


dataset = Basic(Path('./data/imgs/'), 0.25)
n_val = int(len(dataset) * 0.25)
train_set, val_set = random_split(dataset, [len(dataset) - n_val, n_val], generator=torch.Generator().manual_seed(0))
loader = DataLoader(train_set, shuffle=True, batch_size=len(dataset) // 2)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in loader:
    images, masks = batch['image'], batch['mask']
    opt.zero_grad()
    nn.functional.cross_entropy(model(images), masks).backward()
    opt.step()
"""


def test_a_unet_style_dataset_of_dict_samples_through_random_split(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "imgs"
    write_images(folder, {f"c{i}.png": (64, 96, 3) for i in range(4)})
    (folder / ".keep").write_text("")
    script = tmp_path / "train.py"
    script.write_text(UNET_LIKE)
    (report,) = estimate_source(UNET_LIKE, str(script), EstimateOptions(device="cpu"))
    assert report.complete, report.unknowns
    assert any(a.text.startswith("Basic samples: 3x16x24, 16x24, as __getitem__(0)") for a in report.assumptions)
    assert [layer.output_shape for layer in report.layers] == [(2, 8, 16, 24), (2, 8, 16, 24), (2, 2, 16, 24)]
