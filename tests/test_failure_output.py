"""Failure studies write what people read: each set's record names its first failed
components and counts them (every one on request), a report can be written gzipped, and a
sweep gives the failure slowdown and plots the failure figures."""

from __future__ import annotations

import gzip
import json

import pytest

from fabricjax.core.output import json_text, write_json
from fabricjax.core.stream import beside
from fabricjax.engine.plan import COMPONENTS_SHOWN
from fabricjax.report.json import report_dict
from fabricjax.report.plots import write_plots
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze

# 64 GPUs on 2 planes: 128 fabric cables, half of them failed in each set
MANY = {"fabric": {"gpus": 64, "planes": 2, "radix": 16},
        "workload": [{"collective": "permutation", "size": "1MiB"}],
        "failures": {"links": {"probability": 0.5}, "samples": 3, "seed": 2},
        "policies": ["ecmp", "spray"]}


@pytest.fixture(scope="module")
def both():
    summary = analyze(parse_scenario(MANY))
    full = analyze(parse_scenario({**MANY, "failures": {**MANY["failures"],
                                                        "detail": "full"}}))
    return summary, full


def test_a_record_names_its_first_components_and_counts_them(both):
    summary, full = both
    for short, long in zip(summary.failures.records, full.failures.records):
        assert short["components_total"] == long["components_total"] > COMPONENTS_SHOWN
        assert len(long["components"]) == long["components_total"]
        assert short["components"] == long["components"][:COMPONENTS_SHOWN]
        # the figures are the same whatever the detail
        assert short["p100_utilisation"] == long["p100_utilisation"]
        assert short["completion_s"] == long["completion_s"]
    worst = summary.failures.summaries[0]
    assert worst.worst_set_components_total > len(worst.worst_set_components)
    small = len(json_text(report_dict(summary)))
    large = len(json_text(report_dict(full)))
    assert small < 0.7 * large


def test_a_report_written_as_json_gz_is_gzip_and_its_stream_goes_beside(both, tmp_path):
    report = report_dict(both[0])
    path = tmp_path / "study.json.gz"
    write_json(report, path)
    assert json.loads(gzip.decompress(path.read_bytes())) == json.loads(json_text(report))
    again = tmp_path / "again.json.gz"
    write_json(report, again)
    assert again.read_bytes() == path.read_bytes()          # no timestamp in the header
    assert beside(path) == str(tmp_path / "study.jsonl")


def test_a_sweep_plots_the_failure_figures(tmp_path):
    rows = [{"fabric.planes": p, "policy": "spray", "workload": "perm",
             "failures_p100_p99": 1.0 + p / 10, "failures_slowdown_p99": 1.0 + p / 20}
            for p in (1, 2, 4, 8)]
    written = {p.name for p in write_plots(None, tmp_path, sweep=(rows, ["fabric.planes"]))}
    assert {"sweep_failures_p100_p99.png", "sweep_failures_slowdown_p99.png"} <= written
