"""SourceText's per-line facts answer as slicing the line out each time does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from torch_preflight.core.source import Position, SourceText

TEXTS = st.text(alphabet=st.sampled_from(["a", " ", "\n", "\r", "é", "€", "𝔸", "\t"]), max_size=40)


@given(TEXTS, st.integers(-3, 12), st.integers(0, 30))
def test_offset_and_char_col_match_the_line_text(text: str, line: int, col: int) -> None:
    source = SourceText(text)
    line_text = source.line(line)
    if 0 <= line < len(source.line_starts):
        assert source.offset(Position(line, col)) == source.line_starts[line] + min(col, len(line_text))
    expected = len(line_text.encode("utf-8")[:col].decode("utf-8", errors="ignore")) if not line_text.isascii() else col
    assert source.char_col(line, col) == expected


def test_non_ascii_line_converts_bytes_to_code_points() -> None:
    source = SourceText("x = 1\ny = 'é' + z\r\nw\n")
    assert source.char_col(1, 12) == 11  # `z`, after the two-byte é
    assert source.char_col(0, 4) == 4
    assert source.offset(Position(1, 99)) == 6 + len("y = 'é' + z")
