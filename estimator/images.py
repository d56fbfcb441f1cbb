"""Images of the project, read from their headers as PIL would open them, never decoded: a script's dataset that
opens its images (`Image.open(path)`, `.size`, `.resize(...)`, `.convert(mode)`, `np.asarray(img)`) gets the array
shape the images make, without PIL and without reading a pixel.

`image_header(path)` reads the width, height and PIL mode from PNG (IHDR), JPEG (the SOF0-SOF15 frame header, found by
walking the segments' lengths), GIF (the logical screen) and BMP (the DIB header); `array_shape(size, mode)` is
`np.asarray`'s shape and dtype for an image of that size and mode. Pure functions; None for what they cannot read.
"""

from __future__ import annotations

import struct
from typing import IO

# PNG colour types (and bit depths) -> PIL modes
PNG_MODES = {(0, 1): "1", (0, 8): "L", (0, 16): "I;16", (2, 8): "RGB", (2, 16): "RGB", (3, 1): "P", (3, 2): "P",
             (3, 4): "P", (3, 8): "P", (4, 8): "LA", (6, 8): "RGBA", (6, 16): "RGBA"}
JPEG_MODES = {1: "L", 3: "RGB", 4: "CMYK"}
BMP_MODES = {1: "P", 4: "P", 8: "P", 16: "RGB", 24: "RGB", 32: "RGB"}
# np.asarray(img): channels and dtype by mode (no channel axis when channels is 0)
ARRAY = {"1": (0, "bool"), "L": (0, "uint8"), "P": (0, "uint8"), "I;16": (0, "uint16"), "I": (0, "int32"),
         "F": (0, "float32"), "LA": (2, "uint8"), "PA": (2, "uint8"), "RGB": (3, "uint8"), "YCbCr": (3, "uint8"),
         "LAB": (3, "uint8"), "HSV": (3, "uint8"), "RGBA": (4, "uint8"), "RGBa": (4, "uint8"), "CMYK": (4, "uint8")}
SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
MAX_SEGMENTS = 256  # a JPEG's segments walked before its frame header


def image_header(f: IO[bytes]) -> tuple[int, int, str] | None:
    """(width, height, PIL mode) of the image file f, from its header; None if it is no image this reads."""
    head = f.read(32)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR" and len(head) >= 26:
        width, height, depth, colour = struct.unpack(">IIBB", head[16:26])
        mode = PNG_MODES.get((colour, depth))
        return (width, height, mode) if mode else None
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return width, height, "P"
    if head[:2] == b"BM" and len(head) >= 30:
        (dib,) = struct.unpack("<I", head[14:18])
        if dib == 12:
            width, height, _, bpp = struct.unpack("<HHHH", head[18:26])
        else:
            width, height, _, bpp = struct.unpack("<iiHH", head[18:30])
        mode = BMP_MODES.get(bpp)
        return (width, abs(height), mode) if mode and width > 0 else None
    if head[:2] == b"\xff\xd8":
        f.seek(2)
        return _jpeg(f)
    return None


def _jpeg(f: IO[bytes]) -> tuple[int, int, str] | None:
    for _ in range(MAX_SEGMENTS):
        marker = f.read(2)
        while marker[:1] == b"\xff" and marker[1:2] == b"\xff":  # fill bytes before a marker
            marker = marker[1:] + f.read(1)
        if len(marker) != 2 or marker[0] != 0xFF:
            return None
        if 0xD0 <= marker[1] <= 0xD9 or marker[1] == 0x01:  # markers without a length
            continue
        length = f.read(2)
        if len(length) != 2:
            return None
        (n,) = struct.unpack(">H", length)
        if marker[1] in SOF:
            frame = f.read(6)
            if len(frame) != 6:
                return None
            _, height, width, components = struct.unpack(">BHHB", frame)
            mode = JPEG_MODES.get(components)
            return (width, height, mode) if mode and height > 0 else None
        f.seek(n - 2, 1)
    return None


def array_shape(size: tuple[int, int], mode: str) -> tuple[tuple[int, ...], str] | None:
    """np.asarray(img)'s shape and dtype for a PIL image of `size` (width, height) and `mode`."""
    if mode not in ARRAY:
        return None
    channels, dtype = ARRAY[mode]
    width, height = size
    return ((height, width, channels) if channels else (height, width)), dtype
