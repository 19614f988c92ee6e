"""Honest numbers: no NaN or infinity ever reaches a table or a JSON file.

A number that was not computed (a stalled collective has no completion time) is None in every
record and null in JSON, and the record's status says why ("stalled"); tables print a word or a
dash for it. Checked as a property over random small scenarios with failures (dead cables,
switches, NIC ports, whole planes, degraded cables, GPUs cut off from every plane), on the raw
records as well as on `report_dict`, so the check does not depend on `report_dict` cleaning up.

Cost: every new fabric shape recompiles each policy's solvers (tens of seconds on 2 CPU cores),
so the quick property keeps one fabric and failure sets whose padded id lists stay in one bucket
(at most 8 dead links, 8 dead switch nodes, 8 degraded links, 3 sets); the explicit cases reuse
that shape. The slow property draws the fabric too.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from rich.console import Console

from fabricjax.report import tables as rp
from fabricjax.report.json import report_dict
from fabricjax.report.topo import topo_table
from fabricjax.study.analyze import analyze
from fabricjax.core import executables
from fabricjax.core.errors import ScenarioError
from fabricjax.core.registry import known_names
from fabricjax.scenario import parse_scenario

POLICIES = known_names()   # every registered policy, in the reports' order

# 10 GPUs on 3 T0s per plane (the last one half full), 4 spines per plane, 2 planes: a whole
# plane is 7 switch nodes, so a plane plus one switch still pads to 8.
QUICK_FABRIC = {"gpus": 10, "planes": 2, "radix": 8}
QUICK_SAMPLES = 3
# fixed so that the shapes and static arguments (mrc max_iters, EVs per flow) never change
SOLVERS = {"mrc_iters": 8, "mrc_patience": 4, "optimal_iters": 60}
# "nan", "inf", "infinity" as words, in any case, and the infinity sign
NON_FINITE_TEXT = re.compile(r"\b(nan|inf|infinity)\b|∞", re.IGNORECASE)


# --------------------------------------------------------------------------- strategies

def sizes():
    """1 byte .. 2^60 bytes (the schema's range), powers of two and a few odd ones."""
    return st.one_of(st.integers(0, 60).map(lambda k: 2**k), st.sampled_from([3, 1000, 12345]))


@st.composite
def workload_items(draw, gpus: int, *, quick: bool):
    """A permutation (shift or random cycle) or a ring all-reduce; outside the quick property
    the job may be a part of the fabric (a GPU count, or a list of GPU ids)."""
    job: dict = {}
    n = gpus
    mode = "all" if quick else draw(st.sampled_from(["all", "count", "list"]))
    if mode == "count":
        n = draw(st.integers(2, gpus))
        job["gpus"] = n
    elif mode == "list":
        job["gpus"] = draw(st.lists(st.integers(0, gpus - 1), min_size=2, max_size=gpus,
                                    unique=True))
        n = len(job["gpus"])
    if draw(st.booleans()):
        item = {"collective": "permutation", "size": draw(sizes()), **job}
        if draw(st.booleans()):
            item["shift"] = draw(st.integers(1, n - 1))
        return item
    return {"collective": "all-reduce", "algorithm": "ring", "size": draw(sizes()),
            "order": draw(st.sampled_from(["linear", "random"])), **job}


def gpu_kill(draw, planes: int, gpu: int) -> tuple[str, list[str]]:
    """(kind, names) that kill every NIC port of `gpu`: NIC-port names, or the host cables by
    their link names (up or down: either kills the cable both ways)."""
    if draw(st.booleans()):
        return "nic_ports", [f"plane{p}/gpu{gpu}" for p in range(planes)]
    return "links", [f"plane{p}/gpu{gpu}/{draw(st.sampled_from(['up', 'down']))}"
                     for p in range(planes)]


@st.composite
def failure_sections(draw, fabric: dict, *, quick: bool):
    """A `failures:` section. quick: at most one random cable, one switch, one NIC port, one
    plane, two degraded cables and one GPU cut off, in QUICK_SAMPLES sets (one padded shape)."""
    planes, gpus = fabric["planes"], fabric["gpus"]
    few = (lambda hi: st.integers(0, 1 if quick else hi))
    section: dict = {
        "links": {"random": draw(few(3))},
        "switches": {"random": draw(few(2)), "tier": draw(st.sampled_from(["t0", "t1"]))},
        "nic_ports": {"random": draw(few(3))},
        "degraded": {"random": draw(st.integers(0, 2 if quick else 3)),
                     "factor": draw(st.sampled_from([0.125, 0.5, 0.75]))},
        "seed": draw(st.integers(0, 2**31 - 1)),
        "reconvergence_s": draw(st.sampled_from([0.0, 5.0, 30.0])),
        "transport_timeout_s": draw(st.sampled_from([1e-6, 30.0])),
        "mrc_reaction_us": draw(st.sampled_from([0.0, 50.0])),
        "restart_s": draw(st.sampled_from([0.0, 600.0])),
    }
    plane_mode = draw(st.sampled_from(["none", "none", "random", "named"]))
    if plane_mode == "random":
        section["planes"] = {"random": draw(st.integers(1, 1 if quick else planes))}
    elif plane_mode == "named":
        chosen = draw(st.lists(st.integers(0, planes - 1), min_size=1,
                               max_size=1 if quick else planes, unique=True))
        section["planes"] = chosen                       # bare integers: plane<p>
    if not quick and draw(st.booleans()):
        section["links"]["probability"] = draw(st.sampled_from([0.01, 0.1]))
    kills = draw(st.sampled_from([0, 0, 1] if quick else [0, 0, 1, 2]))
    for gpu in draw(st.lists(st.integers(0, gpus - 1), min_size=kills, max_size=kills,
                             unique=True)):
        kind, names = gpu_kill(draw, planes, gpu)
        section[kind].setdefault("names", []).extend(names)
    if draw(st.booleans()):                   # a host cable at reduced rate: the NIC slows down
        port = f"plane{draw(st.integers(0, planes - 1))}/gpu{draw(st.integers(0, gpus - 1))}"
        section["degraded"]["names"] = [f"{port}/{draw(st.sampled_from(['up', 'down']))}"]
    drawn = any(isinstance(v, dict) and (v.get("random") or v.get("probability"))
                for v in section.values())
    if quick:
        if not drawn:                         # QUICK_SAMPLES different sets need a random part
            section["links"]["random"] = 1
        section["samples"] = QUICK_SAMPLES
    else:
        section["samples"] = draw(st.integers(2, 4)) if drawn else 1
    return section


@st.composite
def fabrics(draw):
    """Small fabrics: 8..96 GPUs, 1/2/4 planes, radix 8 or 16, sometimes 3:1 oversubscribed
    (and now and then an oversubscription that does not split the radix: rejected)."""
    radix = draw(st.sampled_from([8, 16]))
    over = draw(st.sampled_from([1.0, 1.0, 1.0, 3.0, 3.0, 2.0]))
    up = radix / (1 + over)
    reach = radix * (radix - round(up))
    fabric = {"gpus": draw(st.integers(8, max(8, min(96, reach)))),
              "planes": draw(st.sampled_from([1, 2, 4])), "radix": radix,
              "port_gbps": draw(st.sampled_from([100.0, 100.0, 1e-3, 1e5]))}   # schema's range
    if over != 1.0:
        fabric["oversubscription"] = over
    return fabric


@st.composite
def scenario_dicts(draw, *, quick: bool):
    fabric = dict(QUICK_FABRIC) if quick else draw(fabrics())
    planes = fabric["planes"]
    data = {
        "name": "honest",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "fabric": fabric,
        "workload": draw(st.lists(workload_items(fabric["gpus"], quick=quick), min_size=1,
                                  max_size=2)),
        "policies": draw(st.lists(st.sampled_from(POLICIES), min_size=1, max_size=4,
                                  unique=True)),
        "spray": {"evs": 2 * planes},
        "mrc": {"evs": 2 * planes, "max_iters": SOLVERS["mrc_iters"],
                "patience": SOLVERS["mrc_patience"]},
        "optimal": {"max_iters": SOLVERS["optimal_iters"]},
        "solver": {"step_latency_us": draw(st.sampled_from([0.0, 2.5]))},
        "failures": draw(failure_sections(fabric, quick=quick)),
    }
    if not quick:
        data["ecmp"] = {"qps": draw(st.sampled_from([1, 2]))}
        data["solver"].update(eps=draw(st.sampled_from([0.0, 0.01, 0.5])),
                              max_rounds=draw(st.sampled_from([1, 2000])))
        if draw(st.sampled_from([False, False, False, True])):   # results and reliability only
            del data["failures"]
    if draw(st.booleans()):
        data["reliability"] = {"link_failures_per_hour": 1e-5, "switch_failures_per_hour": 2e-6,
                               "nic_port_failures_per_hour": 1e-5,
                               "step_time_s": draw(st.sampled_from([None, 2.0]))}
    return data


def parse_or_reject(data: dict):
    try:
        return parse_scenario(data)
    except ScenarioError:
        assume(False)


# --------------------------------------------------------------------------- checks

def non_finite(value, path: str = "$") -> list[str]:
    """Paths of every float NaN or infinity in nested dicts, lists, tuples and dataclasses
    (numpy floats included: json would refuse them anyway)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return non_finite(dataclasses.asdict(value), path)
    if isinstance(value, (float, np.floating)):
        return [] if math.isfinite(float(value)) else [f"{path} = {value!r}"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{path}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{path}[{i}]")]
    if isinstance(value, np.ndarray):
        bad = ~np.isfinite(value) if value.dtype.kind == "f" else np.zeros(value.shape, bool)
        return [f"{path}{list(i)} = {value[i]!r}" for i in zip(*np.nonzero(bad))]
    return []


def positive_finite(value, what: str) -> None:
    assert isinstance(value, float) and math.isfinite(value) and value > 0, (what, value)


def check_outcome(rec: dict, where: str) -> None:
    """completion_s is None exactly when flows stalled, and the status then says so."""
    stalled = rec["stalled_flows"]
    assert isinstance(stalled, int) and stalled >= 0, (where, rec)
    if stalled > 0:
        assert rec["completion_s"] is None, (where, rec)
        assert rec["slowdown"] is None, (where, rec)
        assert "stalled" in rec["status"], (where, rec)
    else:
        assert rec["completion_s"] is not None, (where, rec)
        positive_finite(rec["completion_s"], f"{where}: completion_s")
        positive_finite(rec["slowdown"], f"{where}: slowdown")
        assert "stalled" not in rec["status"], (where, rec)


def check_records(report) -> None:
    for r in report.records:
        rec = r.as_dict()
        where = f"result {r.policy}/{r.workload}"
        check_outcome(rec, where)
        assert r.stalled_flows == 0, (where, "a healthy fabric stalled flows", rec)
        for key in ("algbw_gbps", "busbw_gbps"):
            assert (rec[key] is None) == (rec["completion_s"] is None), (where, key, rec)
            if rec[key] is not None:
                positive_finite(rec[key], f"{where}: {key}")
        for key in ("line_rate_s", "endpoint_bound_s"):
            positive_finite(rec[key], f"{where}: {key}")
        assert rec["endpoint_bound_s"] >= rec["line_rate_s"] * (1 - 1e-6), (where, rec)


def check_failures(report) -> None:
    study = report.failures
    assert study is not None
    by_pair: dict = {}
    for rec in study.records:
        where = f"failure set {rec['failure_set']} {rec['policy']}/{rec['workload']}"
        check_outcome(rec, where)
        assert bool(rec["stalled_pairs"]) == (rec["stalled_flows"] > 0), (where, rec)
        assert (rec["stall_s"] is None) == (rec["policy"] == "optimal"), (where, rec)
        # a bound has no transient, but a set that stalls a flow fails any job (a crash)
        assert (rec["gpu_seconds_lost"] is None) == (
            rec["policy"] == "optimal" and rec["stalled_flows"] == 0), (where, rec)
        assert rec["crash"] or rec["stalled_flows"] == 0, (where, rec)
        by_pair.setdefault((rec["policy"], rec["workload"]), []).append(rec)
    assert len(study.summaries) == len(by_pair)
    for s in study.summaries:
        recs = by_pair[(s.policy, s.workload)]
        where = f"summary {s.policy}/{s.workload}"
        assert s.sets == len(recs) == study.samples, where
        stalled = sum(r["completion_s"] is None for r in recs)
        assert s.stalled_sets == stalled, (where, s.stalled_sets, stalled)
        assert (s.completion_s is None) == (stalled == s.sets), (where, s)
        assert (s.slowdown is None) == (stalled == s.sets), (where, s)
        for dist in (s.completion_s, s.slowdown, s.p100_utilisation):
            if dist is not None:
                assert dist["p50"] <= dist["p99"] <= dist["max"], (where, dist)
        if stalled:
            assert "stalled" in s.status, (where, s.status)
            assert recs[s.worst_set]["completion_s"] is None, (where, "worst set not stalled")


def render(renderable) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def rendered_text(report) -> str:
    """Every table and line the CLI prints for this report, as plain text."""
    parts = [rp.fabric_line(report.fabric), render(topo_table(report.fabric)),
             render(rp.utilisation_table(report)), render(rp.time_table(report))]
    adaptation = rp.adaptation_table(report)
    if adaptation is not None:
        parts.append(render(adaptation))
    parts += rp.trace_lines(report) + rp.bottleneck_lines(report)
    if report.failures is not None:
        parts += [rp.failure_header(report), render(rp.failure_table(report)),
                  render(rp.transient_table(report))]
        parts += rp.failure_lines(report)
    if report.reliability:
        parts.append(render(rp.reliability_table(report)))
    return "\n".join(parts)


def check_report(report) -> dict:
    """The whole contract on one report; returns the JSON-ready dict."""
    raw = {"results": [r.as_dict() for r in report.records],
           "failures": report.failures.as_dict() if report.failures is not None else None,
           "reliability": ([r.as_dict() for r in report.reliability]
                           if report.reliability is not None else None)}
    assert non_finite(raw) == []
    data = report_dict(report)
    assert non_finite(data) == []
    json.dumps(data, allow_nan=False)
    check_records(report)
    if report.failures is not None:
        check_failures(report)
    text = rendered_text(report)
    assert NON_FINITE_TEXT.search(text) is None, NON_FINITE_TEXT.search(text)
    return data


# --------------------------------------------------------------------------- properties

def record_events(report) -> None:
    """What an example exercised (shown by pytest --hypothesis-show-statistics)."""
    if report.failures is None:
        event("no failures section")
        return
    records = report.failures.records
    event("some set stalls flows" if any(r["stalled_flows"] for r in records)
          else "no set stalls flows")
    if all(r["stalled_flows"] for r in records):
        event("every set stalls flows")


PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.filter_too_much])


def _analyze_and_check(data: dict, trace: bool) -> None:
    report = analyze(parse_or_reject(data), trace=trace)
    record_events(report)
    check_report(report)
    executables.release_when_crowded()     # every example compiles programs of its own fabric


@settings(max_examples=8, **PROPERTY)
@given(data=scenario_dicts(quick=True), trace=st.booleans())
def test_no_non_finite_number_reaches_json_or_tables(data, trace):
    _analyze_and_check(data, trace)


@pytest.mark.slow
@settings(max_examples=20, **PROPERTY)
@given(data=scenario_dicts(quick=False), trace=st.booleans())
def test_no_non_finite_number_reaches_json_or_tables_any_fabric(data, trace):
    _analyze_and_check(data, trace)


# --------------------------------------------------------------------------- explicit cases

def quick_scenario(failures: dict, *, fabric: dict = QUICK_FABRIC, policies=POLICIES) -> dict:
    """The explicit cases: shift-1 permutation and linear ring, `failures` plus one random
    cable in QUICK_SAMPLES sets (on QUICK_FABRIC: the property's shapes, nothing recompiles)."""
    planes = fabric["planes"]
    return {
        "name": "honest",
        "fabric": fabric,
        "workload": [{"collective": "permutation", "size": "64MiB", "shift": 1},
                     {"collective": "all-reduce", "size": "16MiB"}],
        "policies": list(policies),
        "spray": {"evs": 2 * planes},
        "mrc": {"evs": 2 * planes, "max_iters": SOLVERS["mrc_iters"],
                "patience": SOLVERS["mrc_patience"]},
        "optimal": {"max_iters": SOLVERS["optimal_iters"]},
        "failures": {"samples": QUICK_SAMPLES, "links": 1, **failures},
    }


def test_gpu_with_every_nic_port_dead_stalls_its_flows():
    """GPU 3 is cut off from both planes in every set: with shift 1 (and the linear ring) its
    two flows 2->3 and 3->4 have no live path under every policy."""
    gpu, n = 3, QUICK_FABRIC["gpus"]
    names = [f"plane{p}/gpu{gpu}" for p in range(QUICK_FABRIC["planes"])]
    report = analyze(parse_scenario(quick_scenario({"nic_ports": {"names": names}})))
    data = check_report(report)
    pairs = {f"gpu{gpu - 1}->gpu{gpu}", f"gpu{gpu}->gpu{(gpu + 1) % n}"}
    records = data["failures"]["records"]
    assert len(records) == len(POLICIES) * 2 * QUICK_SAMPLES
    for rec in records:
        assert rec["stalled_flows"] == 2, rec
        assert rec["completion_s"] is None and rec["slowdown"] is None, rec
        assert "stalled" in rec["status"], rec
        assert set(rec["stalled_pairs"]) == pairs, rec
        assert set(names) <= set(rec["components"]), rec
        assert math.isfinite(rec["p100_utilisation"]), rec
    for s in data["failures"]["summary"]:
        assert s["stalled_sets"] == QUICK_SAMPLES, s
        assert s["completion_s"] is None and s["slowdown"] is None, s
        assert s["p100_utilisation"] is not None, s
        assert "stalled" in s["status"], s
    assert "(job stalls)" in render(rp.failure_table(report))


def test_whole_plane_dead_in_every_set():
    """Plane 0 dead in every set: every flow keeps plane 1, so nothing stalls, and each flow's
    NIC rate halves (200G offered, one live 100G port): the slowdown is at least 2 (in the
    fluid model; the transport's latency, the same with one plane or two, would dilute it)."""
    report = analyze(parse_scenario({**quick_scenario({"planes": [0]}),
                                     "transport": {"enabled": False}}))
    data = check_report(report)
    for rec in data["failures"]["records"]:
        assert "plane0" in rec["components"], rec
        assert rec["stalled_flows"] == 0, rec
        assert rec["completion_s"] is not None and math.isfinite(rec["completion_s"]), rec
        assert rec["slowdown"] >= 2.0 * (1 - 1e-4), rec
    for s in data["failures"]["summary"]:
        assert s["stalled_sets"] == 0 and s["completion_s"] is not None, s


@pytest.mark.parametrize("policies", [
    ("ecmp", "spray"),
    pytest.param(POLICIES, marks=pytest.mark.slow),
])
def test_only_plane_dead_stalls_everything(policies):
    """A one-plane fabric whose plane is dead in every set: no link is alive and every flow
    stalls; every number is either finite (utilisation over no links is 0) or None."""
    fabric = {"gpus": 8, "planes": 1, "radix": 8}
    report = analyze(parse_scenario(quick_scenario({"planes": [0]}, fabric=fabric,
                                                   policies=policies)))
    data = check_report(report)
    for rec in data["failures"]["records"]:
        assert rec["stalled_flows"] == fabric["gpus"], rec
        assert rec["completion_s"] is None and "stalled" in rec["status"], rec
    for s in data["failures"]["summary"]:
        assert s["stalled_sets"] == QUICK_SAMPLES and s["completion_s"] is None, s


@pytest.mark.slow
def test_single_t0_fabric_with_a_dead_t0():
    """Every GPU under one T0 per plane (no cross-T0 flow, so optimal has only its padding
    commodity), and that T0 dead on plane 0 in every set: nothing stalls, the NIC rate halves."""
    fabric = {"gpus": 8, "planes": 2, "radix": 16}
    report = analyze(parse_scenario(quick_scenario({"switches": ["plane0/t0-0"]},
                                                   fabric=fabric)))
    data = check_report(report)
    for rec in data["results"]:
        assert rec["utilisation_by_tier"]["t0-t1"]["p100"] == 0.0, rec
    for rec in data["failures"]["records"]:
        assert rec["stalled_flows"] == 0 and rec["slowdown"] >= 2.0 * (1 - 1e-4), rec
