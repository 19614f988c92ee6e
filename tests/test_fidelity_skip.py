"""Skipping steady states (`dynamic.skip_steady`) keeps every calibration case's figures: per
case of bench/fidelity/compare.py, the dynamic level run with skipping gives each htsim run's
P50, P99 and max FCT (the mean over the case's seeds, as compare.py scores them) within 1% of
the figures the committed full-stepping run recorded (bench/fidelity/dynamic_last_run.log,
which `compare.py --model dynamic` writes). Slow: the cases take over an hour together."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

FIDELITY = Path(__file__).resolve().parents[1] / "bench" / "fidelity"
STEPPED_LOG = FIDELITY / "dynamic_last_run.log"


def _compare():
    spec = importlib.util.spec_from_file_location("compare", FIDELITY / "compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


compare = _compare()


def stepped_rows() -> dict[str, dict[str, np.ndarray]]:
    """{case: {htsim run: fabricjax's (p50, p99, max) in us}} of the committed stepping log
    (the rows scored against htsim's reference NIC; the pinned-NIC rows repeat them)."""
    rows: dict[str, dict[str, np.ndarray]] = {}
    for line in STEPPED_LOG.read_text().splitlines():
        cells = line.split()
        if len(cells) < 14 or cells[3] != "dynamic" or "double" in line:
            continue
        rows.setdefault(cells[0], {})[cells[2]] = np.array(cells[7:10], float)
    return rows


STEPPED = stepped_rows()


def test_the_stepping_log_covers_every_case():
    assert set(STEPPED) == set(compare.CASES)
    assert all(len(runs) >= 3 for runs in STEPPED.values())


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(compare.CASES))
def test_skipping_keeps_the_case_within_one_percent_of_stepping(case, tmp_path, monkeypatch):
    monkeypatch.setitem(compare.DYNAMIC_OVERRIDES, "skip_steady", True)
    seeds = [s for s in compare.SEEDS if compare.matrix_path(case, s).exists()]
    ours = {s: compare.dynamic_fcts(case, s, tmp_path) for s in seeds}
    compare.release_when_crowded()
    for run, recorded in STEPPED[case].items():
        common = [s for s in seeds if compare.htsim_fcts(case, run, s) is not None]
        policy = next(p for p, runs in compare.POLICIES.items() if run in runs)
        key = run if run in ours[common[0]] else policy
        skipping = np.mean([ours[s][key][:3] for s in common], axis=0) * 1e6
        # the log rounds to 0.1 us: a short flow's 1% is within its rounding
        np.testing.assert_allclose(skipping, recorded, rtol=0.01, atol=0.05,
                                   err_msg=f"{case} {run}")
