"""Tables a planner can trust on any terminal: every figure whole at 80 and 120 columns, every
policy with its row (and a reason when a model did not run), and a figure whose meaning
differs by policy marked as such.

The column dealing (`report.layout`) is checked against a brute-force reference on random
widths; the tables are checked on real analyses of tiny fabrics.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
import re

import pytest
from rich.console import Console

from fabricjax.core.units import format_seconds
from fabricjax.report.json import report_dict
from fabricjax.report.layout import (Column, FitTable, balanced_columns, deal_columns,
                                     table_width)
from fabricjax.report.tables import (LOST_PLANE_MARK, adaptation_table, failure_table,
                                     flow_table, sweep_table, time_table, transient_table,
                                     utilisation_table)
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze

WIDTHS = (80, 120)
TINY = {"gpus": 16, "planes": 2, "radix": 8}


def rendered(table, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(table)
    return console.export_text()


@pytest.fixture(scope="module")
def skewed():
    """A skewed all-to-all whose spraying has 240 flows x 2048 EVs = 491,520 flow-path pairs,
    past what `solver.progressive: auto` simulates; ECMP's 2 QPs per flow are simulated."""
    scenario = parse_scenario({
        "name": "skewed", "seed": 1, "fabric": TINY, "policies": ["ecmp", "spray"],
        "spray": {"evs": 2048},
        "workload": [{"name": "moe-hot-expert", "collective": "all-to-all", "size": "4MiB",
                      "skew": 1.0}]})
    return analyze(scenario)


@pytest.fixture(scope="module")
def plane_down():
    """Plane 1 of 2 dead: spraying moves its share onto plane 0 (P100 2), the optimal bound
    drops it (lost_plane, P100 1); both finish at the same time."""
    scenario = parse_scenario({
        "name": "plane-down", "seed": 1, "fabric": TINY, "policies": ["spray", "optimal"],
        "spray": {"evs": 8}, "solver": {"progressive": False},
        "workload": [{"name": "perm", "collective": "permutation", "size": "4MiB"}],
        "failures": {"planes": [1], "samples": 1}})
    return analyze(scenario)


# --------------------------------------------------------------------------- dealing columns

def reference_parts(widths, keys, width):
    """Brute force: the fewest contiguous groups of the non-key columns that each fit with the
    keys (a column too wide alone gets a group of its own)."""
    rest = list(range(keys, len(widths)))
    best = None
    for mask in range(1 << max(len(rest) - 1, 0)):
        cuts = [i + 1 for i in range(len(rest) - 1) if mask >> i & 1]
        groups = [rest[a:b] for a, b in zip([0] + cuts, cuts + [len(rest)])]
        fits = all(len(g) == 1 or table_width([widths[i] for i in range(keys)] +
                                              [widths[i] for i in g]) <= width
                   for g in groups)
        if fits and (best is None or len(groups) < len(best)):
            best = groups
    return best


@pytest.mark.parametrize("seed", range(40))
def test_columns_are_dealt_out_whole_in_order_and_as_few_tables_as_it_takes(seed):
    rng = random.Random(seed)
    keys = rng.randint(0, 3)
    widths = [rng.randint(3, 25) for _ in range(keys + rng.randint(1, 9))]
    width = rng.randint(30, 130)
    for deal in (deal_columns, balanced_columns):
        parts = deal(widths, keys, width)
        assert all(part[:keys] == list(range(keys)) for part in parts)
        assert [i for part in parts for i in part[keys:]] == list(range(keys, len(widths)))
        for part in parts:
            assert len(part) == keys + 1 or table_width([widths[i] for i in part]) <= width
        assert len(parts) == len(reference_parts(widths, keys, width))


def test_a_fit_table_prints_as_one_table_when_it_fits_and_keeps_every_digit():
    table = FitTable("t", [Column("policy", True), Column("a number"), Column("another one")],
                     keys=1)
    table.add_row("spray", "16.363 ms", "12,345,678")
    for width in (24, 30, 120):
        text = rendered(table, width)
        assert "…" not in text
        assert "16.363 ms" in text and "12,345,678" in text
        assert all(len(line) <= width for line in text.splitlines())
    assert "(1/2)" in rendered(table, 30)
    assert "(1/2)" not in rendered(table, 120)


# --------------------------------------------------------------------------- whole tables

def figures(report) -> list[str]:
    """Figures the completion table must print whole."""
    out = []
    for r in report.records:
        out += [format_seconds(r.completion_s), format_seconds(r.line_rate_s),
                format_seconds(r.endpoint_bound_s)]
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_tables_fit_the_terminal_without_eliding_a_digit_or_dropping_a_column(skewed,
                                                                               plane_down,
                                                                               width):
    for report in (skewed, plane_down):
        tables = [utilisation_table(report), time_table(report), flow_table(report),
                  adaptation_table(report)]
        if report.failures is not None:
            tables += [failure_table(report), transient_table(report)]
        for table in [t for t in tables if t is not None]:
            text = rendered(table, width)
            assert "…" not in text, text
            assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text
            # every header word is printed (a column split off goes to a second table)
            for header in table.headers:
                for word in header.split():
                    assert word in text, (word, text)
            # every figure is printed whole on one line; text cells wrap at their spaces
            for row in table.rows:
                for column, cell in zip(table.columns, row):
                    if column.text:
                        assert all(word in text for word in cell.split()), (cell, text)
                    else:
                        assert f" {cell} " in text, (cell, text)
        completion = rendered(time_table(report), width)
        for figure in figures(report):
            assert figure in completion


def test_a_sweep_table_keeps_every_column_at_80(tmp_path):
    headers = ["planes", "policy", "workload", "P100", "P99", "completion", "slowdown",
               "busbw", "status", "switches", "optics", "kW", "fail P100 p99",
               "fail completion p99", "stalled sets"]
    row = ["8", "spray", "ring-allreduce", "1.688", "1.312", "162.750 ms", "5.083×", "105.5",
           "ok", "1,536", "12,288", "1,234.5", "2.000", "1.234 s", "0"]
    text = rendered(sweep_table(headers, [row]), 80)
    assert "…" not in text
    for cell in row:
        assert cell in text
    for header in headers:
        assert all(word in text for word in header.split())
    assert "(1/2)" in text or "(1/3)" in text


# --------------------------------------------------------------------------- rows with reasons

def test_every_policy_gets_a_flow_level_row_with_the_reason_it_was_not_simulated(skewed):
    ecmp, spray = skewed.records
    assert ecmp.progressive_status in ("ok", "event_limit", "skipped")
    assert spray.progressive_status == "over_limit"
    assert "491,520 flow-path pairs" in spray.progressive_reason
    assert "262,144" in spray.progressive_reason
    data = report_dict(skewed)["results"]
    assert [r["progressive_status"] for r in data] == [ecmp.progressive_status, "over_limit"]
    assert data[1]["progressive_reason"] == spray.progressive_reason
    text = rendered(flow_table(skewed), 120)
    assert re.search(r"spray\s+│\s+moe-hot-expert", text)
    assert re.search(r"spray\s+│.*│\s+over limit\s+│", text)
    assert "not simulated (spray / moe-hot-expert): 491,520 flow-path pairs" in " ".join(
        text.split())


def test_no_flow_table_when_the_user_turned_the_simulation_off(plane_down):
    assert all(r.progressive_status == "off" for r in plane_down.records)
    assert flow_table(plane_down) is None


# --------------------------------------------------------------------------- a lost plane

def test_a_p100_whose_meaning_differs_by_policy_is_marked_and_explained(plane_down):
    summaries = {s.policy: s for s in plane_down.failures.summaries}
    spray, optimal = summaries["spray"], summaries["optimal"]
    assert "lost_plane" in optimal.status and "lost_plane" not in spray.status
    assert spray.p100_utilisation["max"] > optimal.p100_utilisation["max"]
    assert spray.completion_s["max"] == pytest.approx(optimal.completion_s["max"], rel=1e-4)
    text = rendered(failure_table(plane_down), 80)
    lines = [line for line in text.splitlines() if "│" in line]
    assert any("optimal" in line and LOST_PLANE_MARK in line for line in lines)
    assert not any("spray" in line and LOST_PLANE_MARK in line for line in lines)
    flat = " ".join(text.split())
    assert f"{LOST_PLANE_MARK} lost_plane:" in flat
    assert "Compare completion times, not these P100s" in flat


def test_no_mark_and_no_note_without_a_lost_plane(skewed):
    for table in (utilisation_table(skewed), time_table(skewed)):
        assert LOST_PLANE_MARK not in rendered(table, 120)


def test_mrc_clocked_progressive_time_is_labelled_apart_from_the_headline():
    """mrc's progressive time runs on its convergence clock and can exceed its static
    (settled-set) completion, which is the headline: the flow table marks the clocked figure
    and says what each one is, and the docs claim no bound between them."""
    scenario = parse_scenario({"fabric": {"gpus": 1024}, "seed": 0, "policies": ["mrc"],
                               "workload": [{"collective": "permutation", "size": "16MiB"}]})
    report = analyze(scenario)
    (record,) = report.records
    assert record.progressive_s > record.completion_s      # the clock charges convergence
    text = rendered(flow_table(report), 120)
    assert format_seconds(record.progressive_s) + "†" in text
    assert "† on its convergence clock" in " ".join(text.split())
    assert "settled split" in " ".join(rendered(time_table(report), 120).split())
    # with mrc.clock: false the policy says so, and nothing is marked
    unclocked = dataclasses.replace(report, policies={"mrc": {**report.policies["mrc"],
                                                              "clocked": False}})
    assert "†" not in rendered(flow_table(unclocked), 120)
    page = (Path(__file__).resolve().parent.parent / "docs" / "collectives.md").read_text()
    assert "never above the\nstatic" not in page and "never above the static" not in page
