from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
FIXES = ROOT / "tests" / "fixes"

sys.path.insert(0, str(ROOT / "tests"))
