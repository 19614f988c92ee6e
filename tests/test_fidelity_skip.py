"""Skipping steady states (`dynamic.skip_steady`) keeps every calibration case's figures: per
case of bench/fidelity/compare.py, the dynamic level run with skipping gives each htsim run's
P50, P99 and max FCT (the mean over the case's seeds, as compare.py scores them) within 1% of
the figures the committed full-stepping run recorded (bench/fidelity/dynamic_last_run.log,
which `compare.py --model dynamic` writes). Slow: the cases take over an hour together."""

from __future__ import annotations

import numpy as np
import pytest
from fidelity import FIDELITY, compare

STEPPED_LOG = FIDELITY / "dynamic_last_run.log"


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
    seeds = compare.scored_seeds(case, compare.SEEDS)
    ours = {"dynamic": {s: compare.dynamic_fcts(case, s, tmp_path) for s in seeds}}
    compare.release_when_crowded()
    for _, run, variant, _, _, skipping, _ in compare.scored_rows(case, seeds, ours):
        if not variant:
            # the log rounds to 0.1 us: a short flow's 1% is within its rounding
            np.testing.assert_allclose(skipping, STEPPED[case][run], rtol=0.01, atol=0.05,
                                       err_msg=f"{case} {run}")
