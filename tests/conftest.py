from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FIXES = ROOT / "tests" / "fixes"

sys.path.insert(0, str(ROOT / "tests"))


def rule_page(uri: str) -> Path:
    """The local page a rule link points at: fails unless `uri` is a file: URI of an existing file."""
    parsed = urlparse(uri)
    assert parsed.scheme == "file", uri
    path = Path(url2pathname(parsed.path))
    assert path.is_file(), uri
    return path
