"""The fidelity regression: a few small calibration cases scored against their committed htsim
FCTs on every `make test`. Each row's error (fabricjax / htsim - 1 of the P50, P99 and max FCT,
seed 1) may not grow past the error recorded in bench/fidelity/regression.tsv by more than
half a percentage point: a change to either level that moves a row further from packet level
fails here, not weeks later in a full calibration run. A change that improves a row passes;
re-record the file then, so the gain is kept:

    .venv/bin/python bench/fidelity/compare.py --case ft128_1os_perm2MB --seeds 1 \\
        --record bench/fidelity/regression.tsv
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from fidelity import FIDELITY, compare

RECORD = FIDELITY / "regression.tsv"
SLACK = 0.005        # float noise and a last-digit change pass; a real drift does not
SEEDS = (1,)


def recorded() -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """{(case, model): {htsim run: recorded (p50, p99, max) error}}."""
    rows: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    with open(RECORD) as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            rows.setdefault((row["case"], row["model"]), {})[row["run"]] = np.array(
                [row["err_p50"], row["err_p99"], row["err_max"]], float)
    return rows


RECORDED = recorded()


def test_the_record_scores_every_run_of_both_levels():
    assert {model for _, model in RECORDED} == set(compare.MODELS)
    for runs in RECORDED.values():
        assert set(runs) == {run for runs in compare.POLICIES.values() for run in runs}


@pytest.mark.parametrize("case,model", sorted(RECORDED),
                         ids=[f"{case}-{model}" for case, model in sorted(RECORDED)])
def test_no_row_moves_further_from_htsim(case, model, tmp_path):
    ours = {model: {s: compare.MODELS[model](case, s, tmp_path) for s in SEEDS}}
    for _, run, variant, _, _, _, err in compare.scored_rows(case, SEEDS, ours):
        if variant:
            continue
        limit = np.abs(RECORDED[case, model][run]) + SLACK
        worse = np.abs(err) > limit
        assert not worse.any(), (
            f"{case} {model} {run}: error (p50, p99, max) {np.round(err, 4)} past the "
            f"recorded {np.round(RECORDED[case, model][run], 4)} + {SLACK}")
