"""bench/fidelity/compare.py as a module for the tests that score the levels against the
committed htsim FCTs (the bench folder is no package; compare.py puts the project on the path
itself)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

FIDELITY = Path(__file__).resolve().parents[1] / "bench" / "fidelity"

_spec = importlib.util.spec_from_file_location("compare", FIDELITY / "compare.py")
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)
