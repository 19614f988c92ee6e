"""The design search: the cheapest fabric (in money, watts or optics) that meets a target.

Contract: `design_search(base, spec)` takes an ordinary validated scenario (GPUs, workload,
failures) and a `DesignConfig` (the space, the target, the objective, the catalog) and
returns a `DesignResult`: every candidate fabric either dropped, with the reason and the
stage that dropped it, or evaluated by the static level (one row per policy), the cheapest
feasible design with its margin and the workload item that binds, the Pareto front of the
objective, watts and the target metric, and the dynamic level's healthy check of the
feasible front. It never brute-forces what it can rule out:

1. *Enumerate*: every switch part x planes x tiers x oversubscription x EVs is a fabric of
   `nic_gbps / planes` ports (radix = the part's capacity / that rate), built as the
   multi-plane Clos (2 tiers) or a fat tree (3 tiers). One the scenario's own checks refuse
   (too few tiers to reach the GPUs, an odd radix, a ratio that splits no whole ports, a fat
   tree other than 1:1) is dropped with that check's message. Survivors are priced from
   `fabric.bom.scenario_bom` (exactly what `fabricjax topo` counts) and the catalog.
2. *Bound*: a closed-form lower bound on every item's completion -- the busiest NIC's bytes
   (`engine.timing.endpoint_bound_time_s`) and the bytes that must leave or enter each T0
   over its uplinks (the cut an oversubscribed T0 makes), through the same
   `engine.timing.phase_duration_s` as the solve -- is checked against the target before any
   solve (failures only remove capacity, so it bounds every failure quantile too). A design
   whose bound misses is dropped. In objective order, a design that an evaluated one already
   matches (no dearer, no more watts, and measured no worse than this one's bound) is
   dropped as dominated: it can be neither the cheapest feasible design nor on the front.
3. *Static*: the survivors run one by one through `sweeps.run.run_sweep` (the sweep's rows,
   failure figures and compile reuse), cheapest first.
4. *Confirm*: the cheapest feasible design and the feasible front run once more on the
   dynamic level, healthy (its failure timelines are its own study), on the workload items
   whose phases have at most `confirm.max_flows` flows (it steps every flow through time),
   and the healthy metric of both levels is reported side by side.

`on_record(record)` sees every record as it is decided (the stream `--resume` reads back:
`read_design_stream`); `done` replays such records, so a resumed search skips the solves it
already has and decides everything else the same way.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import math
import time
from importlib import resources
from typing import Any, Callable

import numpy as np
import yaml

from fabricjax.config import FABRIC_KINDS, CatalogConfig, DesignConfig, FabricKind, Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.core.registry import known_names, lookup, sections
from fabricjax.core.stream import header, read_stream
from fabricjax.core.units import value_text
from fabricjax.engine.timing import endpoint_bound_time_s, phase_duration_s, wire_factor
from fabricjax.fabric.bom import ratio_text, scenario_bom, t0_ports
from fabricjax.fabric.clos import clos_geometry
from fabricjax.scenario import SafeLoader, parse_scenario, result_config
from fabricjax.study.analyze import analyze, versions
from fabricjax.sweeps.grid import Point
from fabricjax.sweeps.run import run_sweep
from fabricjax.workload.build import build_workload

STREAM_KIND = "fabricjax design"
# relative difference below which two figures on the front count as equal
FRONT_TOLERANCE = 1e-6
OBJECTIVE_KEYS = {"cost": "cost_usd", "watts": "watts", "optics": "optic_modules"}


# --------------------------------------------------------------------------- the catalog

def bundled_catalog() -> CatalogConfig:
    """The catalog shipped with fabricjax (`fabricjax/data/catalog.yaml`)."""
    text = resources.files("fabricjax").joinpath("data/catalog.yaml").read_text("utf-8")
    return CatalogConfig.model_validate(yaml.load(text, Loader=SafeLoader))


def merged_catalog(overlay: CatalogConfig) -> CatalogConfig:
    """The bundled catalog with `overlay`'s parts laid over it, part by part."""
    base = bundled_catalog()
    return CatalogConfig(
        note=overlay.note or base.note,
        switches={**base.switches, **overlay.switches},
        optics={**base.optics, **overlay.optics},
        copper=overlay.copper or base.copper, nic=overlay.nic or base.nic)


# --------------------------------------------------------------------------- candidates

@dataclasses.dataclass(frozen=True)
class Candidate:
    """One fabric of the space: `values` are its coordinates (a sweep point's values)."""

    index: int
    switch: str
    tiers: int
    planes: int
    port_gbps: float
    radix: int
    oversubscription: float
    evs: int | None

    @property
    def name(self) -> str:
        ratio = "" if self.oversubscription == 1 else \
            f" {ratio_text(*t0_ports(self.radix, self.oversubscription))}"
        evs = f" {self.evs} EVs" if self.evs is not None else ""
        return (f"{self.tiers}-tier {self.planes}x{self.port_gbps:g}G {self.switch}{ratio}"
                f"{evs}")

    @property
    def values(self) -> dict:
        out = {"design": self.name, "switch": self.switch, "tiers": self.tiers,
               "planes": self.planes, "port_gbps": self.port_gbps, "radix": self.radix,
               "oversubscription": self.oversubscription}
        if self.evs is not None:
            out["evs"] = self.evs
        return out


def is_bound(policy: str) -> bool:
    """Whether a policy is a bound on the others (no transport, nothing a fabric can run)."""
    return not lookup(policy).transient


def _design_policies(base: Scenario, spec: DesignConfig) -> list[str]:
    policies = list(spec.space.policies or [p for p in base.policies if not is_bound(p)])
    bounds = [p for p in policies if is_bound(p)]
    if bounds:
        raise ScenarioError("design.space.policies", f"{bounds[0]} is a bound on every "
                            "policy, not one a fabric can run; allowed: "
                            f"{', '.join(p for p in known_names() if not is_bound(p))}")
    if not policies:
        raise ScenarioError("design.space.policies", "no policy to run; the scenario's are "
                            f"{', '.join(base.policies)}, all bounds, not designs")
    return policies


def _scenario_for(base: Scenario, dump: dict, cand: Candidate, spec: DesignConfig,
                  catalog: CatalogConfig, policies: list[str], counts: dict) -> Scenario:
    """The scenario of one design: the base's shared fabric fields (those its kind takes:
    a fat tree has no rails), the candidate's own, and a fat tree's `design.paths`."""
    if cand.oversubscription != 1 and cand.tiers == 3:
        raise ScenarioError("fabric.oversubscription", "fat trees are built 1:1 here; allowed: "
                            "1 (oversubscribe a two-tier design instead)")
    data = copy.deepcopy(dump)
    kind = (FabricKind.CLOS if cand.tiers == 2 else FabricKind.FAT_TREE).value
    takes = FABRIC_KINDS[kind].model_fields
    fabric = {name: value for name, value in data["fabric"].items() if name in takes}
    fabric.update(kind=kind, tiers=cand.tiers, planes=cand.planes, port_gbps=cand.port_gbps,
                  radix=cand.radix)
    if kind == FabricKind.CLOS.value:
        fabric["oversubscription"] = cand.oversubscription
    elif spec.paths is not None:
        fabric["paths"] = spec.paths
    data["fabric"] = fabric
    part = catalog.switches[cand.switch]
    data["bom"] = {**data.get("bom", {}), "switch_watts": part.watts,
                   "optic_watts": {**data.get("bom", {}).get("optic_watts", {}),
                                   **{speed: o.watts for speed, o in catalog.optics.items()}}}
    data["policies"] = policies
    if cand.evs is not None:          # every policy section with an EV count takes it
        for section, model in sections().items():
            if "evs" in model.model_fields and isinstance(data.get(section), dict):
                data[section] = {**data[section], "evs": cand.evs}
    scenario = parse_scenario(data, default_name=base.name, base_dir=base.base_dir)
    return scenario.located(base.base_dir, counts)


def price(bom: dict, cand: Candidate, catalog: CatalogConfig, gpus: int) -> dict:
    """Money and watts of a design's bill of materials at the catalog's prices: switches,
    optic modules (at the module speed the BOM counts), copper cables and one NIC per GPU."""
    part = catalog.switches[cand.switch]
    speed = float(bom["module_gbps"])
    if bom["modules"] and speed not in catalog.optics:
        known = ", ".join(f"{s:g}" for s in sorted(catalog.optics))
        raise ScenarioError("design.catalog.optics", f"no {speed:g}G module to price "
                            f"{cand.name} with; known speeds: {known} (add {speed:g}: "
                            "{price_usd: ..., watts: ...})")
    optic = catalog.optics.get(speed)
    copper, nic = catalog.copper, catalog.nic
    cost = {"cost_switches_usd": bom["switches"] * part.price_usd,
            "cost_optics_usd": bom["modules"] * (optic.price_usd if optic else 0.0),
            "cost_copper_usd": bom["copper_links"] * (copper.price_usd if copper else 0.0),
            "cost_nics_usd": gpus * (nic.price_usd if nic else 0.0)}
    nic_watts = gpus * (nic.watts if nic else 0.0)
    return {**cost, "cost_usd": sum(cost.values()), "switches": bom["switches"],
            "optic_modules": bom["modules"], "watts_fabric": bom["watts"],
            "watts": bom["watts"] + nic_watts}


def two_tiers_reach(gpus: int, radix: int) -> bool:
    """Whether a 1:1 two-tier Clos of radix-k switches reaches `gpus` (k x k/2 per plane)."""
    return gpus <= radix * (radix // 2)


def enumerate_designs(base: Scenario, spec: DesignConfig, catalog: CatalogConfig
                      ) -> tuple[list[tuple[Candidate, Scenario, dict]], list[dict]]:
    """Every design of the space: ([(candidate, its scenario, its price)], [dropped])."""
    policies = _design_policies(base, spec)
    names = spec.space.switches or list(catalog.switches)
    for name in names:
        if name not in catalog.switches:
            raise ScenarioError("design.space.switches", f"unknown part {name!r}; allowed: "
                                f"{', '.join(catalog.switches)} (or add it under "
                                "design.catalog.switches)")
    dump = base.model_dump()
    counts = base.traffic_flows
    kept, dropped = [], []
    index = 0
    for name in names:
        part = catalog.switches[name]
        for planes in spec.space.planes:
            port = spec.nic_gbps / planes
            for tiers in spec.space.tiers:
                for ratio in spec.space.oversubscription:
                    for evs in spec.space.evs or [None]:
                        radix = part.capacity_gbps / port
                        cand = Candidate(index, name, tiers, planes, port,
                                         int(round(radix)), float(ratio), evs)
                        index += 1
                        speeds = ", ".join(f"{s:g}G" for s in part.port_speeds)
                        if port not in part.port_speeds:
                            why = (f"{spec.nic_gbps:g}G over {planes} planes is "
                                   f"{port:g}G a port; {name} runs {speeds}")
                        elif abs(radix - round(radix)) > 1e-9:
                            why = f"{part.capacity_gbps:g}G is no whole number of {port:g}G ports"
                        elif tiers == 3 and two_tiers_reach(base.fabric.gpus, cand.radix):
                            why = (f"two tiers of radix {cand.radix} reach "
                                   f"{base.fabric.gpus:,} GPUs already; a third tier only "
                                   "adds switches, optics and hops")
                        else:
                            try:
                                scenario = _scenario_for(base, dump, cand, spec, catalog,
                                                         policies, counts)
                                cost = price(scenario_bom(scenario), cand, catalog,
                                             scenario.fabric.gpus)
                            except ScenarioError as err:
                                if err.field.startswith("design"):
                                    raise
                                why = f"{err.field}: {err.message}" if err.field else err.message
                            else:
                                kept.append((cand, scenario, cost))
                                continue
                        dropped.append({"design": cand.name, "stage": "enumerate",
                                        "reason": why})
    return kept, dropped


# --------------------------------------------------------------------------- bounds

def _t0_cut_s(flows, t0_of: np.ndarray, uplink_gbps: float, wire: float) -> float:
    """Seconds for the bytes that must cross the busiest T0's uplinks (out or in) at their
    whole capacity: every byte between GPUs of different T0s crosses two T0s' uplinks."""
    src, dst = t0_of[flows.src], t0_of[flows.dst]
    crossing = (src != dst) & (flows.size > 0)
    if not np.any(crossing):
        return 0.0
    size = flows.size[crossing] * wire
    busiest = max(np.bincount(src[crossing], weights=size).max(),
                  np.bincount(dst[crossing], weights=size).max())
    return float(busiest * 8e-9 / uplink_gbps)


def item_bounds(scenario: Scenario, collectives: list, cand: Candidate,
                endpoints: dict | None = None) -> list[dict]:
    """Per workload item: a lower bound on its static completion on this design, under any
    policy and any failures (`completion_s`), and an upper bound on the perfect network's
    time its slowdown is read against (`endpoint_s`). None where no bound is known (a
    training step overlaps its phases with compute). `endpoints`: a cache of each phase's
    endpoint time by (phase id, NIC rate), shared over the designs of one search."""
    nic = cand.planes * cand.port_gbps
    wire = wire_factor(scenario)
    endpoints = {} if endpoints is None else endpoints
    t0_of = uplink = None
    if cand.tiers == 2:
        geometry = clos_geometry(scenario.fabric)
        # at 1:1 or under, a T0's uplinks carry at least what its GPUs' NICs can send: the
        # cut never binds beyond the endpoint bound, so it is not computed
        if geometry.gpus_per_t0 > geometry.spines:
            t0_of = np.asarray(geometry.t0_of(np.arange(scenario.fabric.gpus)))
            uplink = cand.planes * geometry.spines * cand.port_gbps
    out = []
    for collective in collectives:
        if collective.step is not None:
            out.append({"workload": collective.name, "completion_s": None, "endpoint_s": None,
                        "busbw_gbps": None})
            continue
        low = high = 0.0
        for phase in collective.phases:
            key = (id(phase), nic, wire)
            if key not in endpoints:
                endpoints[key] = endpoint_bound_time_s(phase.flows, nic, wire)
            endpoint = endpoints[key]
            cut = 0.0 if t0_of is None else _t0_cut_s(phase.flows, t0_of, uplink, wire)
            # the fewest hops any fabric flow takes (host-T0-host) for the bound; the most a
            # design's paths take (up to the top tier and down) for the reference
            low += phase_duration_s(scenario, phase, max(endpoint, cut), min(phase.hops, 2))
            high += phase_duration_s(scenario, phase, endpoint, 2 * cand.tiers)
        busbw = (collective.size * 8e-9 / low * collective.busbw_factor) if low > 0 else None
        out.append({"workload": collective.name, "completion_s": low, "endpoint_s": high,
                    "busbw_gbps": busbw})
    return out


def bound_value(bounds: list[dict], metric: str) -> float | None:
    """The bound on the worst item's metric (a floor for slowdown and times, a ceiling for
    busbw); None when some item has none (it cannot be ruled out)."""
    values = []
    for b in bounds:
        if b["completion_s"] is None:
            return None
        if metric == "slowdown":
            values.append(b["completion_s"] / b["endpoint_s"] if b["endpoint_s"] else None)
        elif metric == "completion_s":
            values.append(b["completion_s"])
        elif metric == "busbw_gbps":
            values.append(b["busbw_gbps"])
        else:
            return None
    if not values or any(v is None for v in values):
        return None
    return min(values) if metric == "busbw_gbps" else max(values)


# --------------------------------------------------------------------------- measured

def item_value(row: dict, metric: str, quantile: str) -> float | None:
    """One row's metric at the quantile over its failure sets (None: not known, e.g. the
    job stalls at that quantile)."""
    healthy_s = row.get("completion_s")
    if quantile == "healthy":
        key = {"slowdown": "fabric_slowdown", "completion_s": "completion_s",
               "busbw_gbps": "busbw_gbps", "step_time_s": "step_time_s"}[metric]
        return row.get(key)
    failed_s = row.get(f"failures_completion_{quantile}_s")
    if failed_s is None or healthy_s is None:
        return None
    if metric == "completion_s":
        return failed_s
    if metric == "slowdown":
        endpoint = healthy_s / row["fabric_slowdown"] if row.get("fabric_slowdown") else None
        return failed_s / endpoint if endpoint else None
    if metric == "busbw_gbps":
        busbw = row.get("busbw_gbps")
        return busbw * healthy_s / failed_s if busbw is not None and failed_s > 0 else None
    return None


def _meets(value: float | None, spec: DesignConfig) -> bool:
    target = spec.target
    if value is None:
        return False
    return value <= target.max if target.max is not None else value >= target.min


def _margin(value: float | None, spec: DesignConfig) -> float | None:
    """Headroom as a fraction of the target: > 0 meets it (0.2: 20% to spare)."""
    target = spec.target
    if value is None:
        return None
    if target.max is not None:
        return (target.max - value) / target.max
    return (value - target.min) / target.min


def _better(a: float, b: float, spec: DesignConfig) -> bool:
    return a < b if spec.target.max is not None else a > b


def _worst(values: list[float | None], spec: DesignConfig) -> float | None:
    """The worst of the known values (None when none is known)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return max(known) if spec.target.max is not None else min(known)


def evaluated_designs(cand: Candidate, cost: dict, rows: list[dict], spec: DesignConfig,
                      bound: float | None, wall_s: float) -> list[dict]:
    """One design per policy from a candidate's sweep rows: its worst item's metric, whether
    it meets the target, its margin and the item (and why) it binds on."""
    target = spec.target
    by_policy: dict[str, list[dict]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    out = []
    for policy, items in by_policy.items():
        worst = worst_item = None
        stalled = []
        for row in items:
            value = item_value(row, target.metric, target.quantile)
            if value is None:
                stalled.append(row["workload"])
                continue
            if worst is None or _better(worst, value, spec):
                worst, worst_item = value, row["workload"]
        if stalled:
            why = (f"{', '.join(stalled)}: no {target.metric} at {target.quantile} (the job "
                   "stalls: a flow lost every path, or the solve did not finish)")
            worst, worst_item = None, stalled[0]
        else:
            why = None
        sets = sum(r.get("stalled_sets") or 0 for r in items)
        out.append({**cand.values, "policy": policy, **cost, "metric": worst,
                    "bound": bound, "feasible": _meets(worst, spec),
                    "margin": _margin(worst, spec), "binding": worst_item,
                    "problem": why, "stalled_sets": sets, "wall_s": wall_s,
                    "healthy_metric": _worst([item_value(r, target.metric, "healthy")
                                              for r in items], spec)})
    return out


def pareto_front(designs: list[dict], spec: DesignConfig) -> list[dict]:
    """The designs that meet the target and that no other such design beats on all of
    objective, watts and metric (and on one by more than FRONT_TOLERANCE), in objective
    order: what more money or watts buys in margin. (Designs that miss the target are not on
    it: the bounds drop many of them unsolved, and none of them answers the question.)"""
    key = OBJECTIVE_KEYS[spec.objective]
    sign = 1.0 if spec.target.max is not None else -1.0

    def point(d: dict) -> tuple[float, float, float]:
        return (float(d[key]), float(d["watts"]), sign * float(d["metric"]))

    def beats(a: tuple, b: tuple) -> bool:
        # no worse on every axis and better on one, beyond float noise: two policies that
        # the same bottleneck holds read the same figure up to the last bits
        close = [math.isclose(x, y, rel_tol=FRONT_TOLERANCE) for x, y in zip(a, b)]
        return (all(x <= y or c for x, y, c in zip(a, b, close)) and
                any(x < y and not c for x, y, c in zip(a, b, close)))

    known = [d for d in designs if d["feasible"]]
    front = [d for d in known if not any(beats(point(e), point(d)) for e in known)]
    return sorted(front, key=lambda d: point(d))


# --------------------------------------------------------------------------- the search

@dataclasses.dataclass
class DesignResult:
    """What `design_search` decided: `designs` (one per evaluated candidate and policy),
    `dropped` ({design, stage, reason}), `best` (the cheapest feasible design, None when none
    meets the target), `front` (the Pareto front), `stages` ({stage, designs in, dropped,
    seconds}) and `total_s`."""

    scenario: str
    spec: DesignConfig
    catalog: CatalogConfig
    candidates: int
    designs: list[dict]
    dropped: list[dict]
    best: dict | None
    front: list[dict]
    stages: list[dict]
    total_s: float


def design_header(base: Scenario, spec: DesignConfig, order: list[Candidate]) -> dict:
    """The first record of a search's stream: the scenario, the design section and the
    order the candidates are decided in (what a resumed run must match)."""
    options = {"design": spec.model_dump(mode="json"),
               "order": [c.name for c in order]}
    return header(STREAM_KIND, result_config(base), options)


def read_design_stream(path: str, expected: dict) -> list[dict]:
    """The records an earlier search streamed to `path` (none when there is no file), after
    checking its header against `expected` (`design_header`)."""
    return read_stream(path, expected)[1]


def _dominated_by(bound: float | None, cost: dict, done: list[dict],
                  spec: DesignConfig) -> dict | None:
    if bound is None:
        return None
    key = OBJECTIVE_KEYS[spec.objective]
    for d in done:
        if (d["metric"] is None or d[key] > cost[key] or d["watts"] > cost["watts"]
                or _better(bound, d["metric"], spec)):
            continue
        # a tie on all three is not dominance: both would be on the front
        tied = (d[key] == cost[key] and d["watts"] == cost["watts"] and
                math.isclose(d["metric"], bound, rel_tol=FRONT_TOLERANCE))
        if not tied:
            return d
    return None


def design_search(base: Scenario, spec: DesignConfig, *,
                  progress: Callable[[str, int, int], None] | None = None,
                  done: list[dict] | None = None,
                  on_record: Callable[[dict], None] | None = None,
                  analyze_fn: Callable | None = None) -> DesignResult:
    """Search `spec`'s space on `base`'s workload (see the module docstring). `done`: the
    records of an earlier run of the same search (`read_design_stream`), replayed instead of
    solved again; `on_record`: sees every new record."""
    analyze_fn = analyze if analyze_fn is None else analyze_fn
    if spec.target.quantile != "healthy" and base.failures is None:
        raise ScenarioError("design.target.quantile", f"{spec.target.quantile} is over the "
                            "failure sets, and the scenario has no 'failures' section; "
                            "allowed: healthy, or add failures (e.g. links: {probability: "
                            "0.01})")
    began = time.perf_counter()
    catalog = merged_catalog(spec.catalog)
    stages = []
    clock = time.perf_counter()
    kept, dropped = enumerate_designs(base, spec, catalog)
    total = len(kept) + len(dropped)
    stages.append({"stage": "enumerate", "designs_in": total, "dropped": len(dropped),
                   "seconds": time.perf_counter() - clock})

    # the bound stage: one workload for every design (the GPUs and the items are shared)
    clock = time.perf_counter()
    collectives = build_workload(base, np.random.default_rng([base.seed, 0]))
    key = OBJECTIVE_KEYS[spec.objective]
    kept.sort(key=lambda k: (k[2][key], k[2]["watts"], k[0].index))
    survivors = []
    bound_dropped = 0
    endpoints: dict = {}
    for cand, scenario, cost in kept:
        bound = bound_value(item_bounds(scenario, collectives, cand, endpoints),
                            spec.target.metric)
        if bound is not None and not _meets(bound, spec):
            dropped.append({"design": cand.name, "stage": "bound", "reason": (
                f"its bound on {spec.target.metric} is {value_text(round(bound, 4))}: no "
                f"policy can meet {_target_text(spec)}")})
            bound_dropped += 1
            continue
        survivors.append((cand, scenario, cost, bound))
    stages.append({"stage": "bound", "designs_in": len(kept), "dropped": bound_dropped,
                   "seconds": time.perf_counter() - clock})

    # the static stage, cheapest first, skipping what an evaluated design already dominates
    clock = time.perf_counter()
    replay = {r["design"]: r for r in (done or []) if r.get("stage") in ("static", "dominated")}
    designs: list[dict] = []
    dominated = solve_refused = 0
    for i, (cand, scenario, cost, bound) in enumerate(survivors):
        if progress is not None:
            progress(f"[{i + 1}/{len(survivors)}] {cand.name}", i, len(survivors))
        by = _dominated_by(bound, cost, designs, spec)
        if by is not None:
            record = {"stage": "dominated", "design": cand.name, "reason": (
                f"{by['design']} with {by['policy']} costs no more and measured "
                f"{value_text(round(by['metric'], 4))}, within this one's bound "
                f"{value_text(round(bound, 4))}")}
            dropped.append({k: record[k] for k in ("design", "stage", "reason")})
            dominated += 1
            if cand.name not in replay and on_record is not None:
                on_record(record)
            continue
        record = replay.get(cand.name)
        if record is None or record.get("stage") != "static":
            record = _static(cand, scenario, analyze_fn)
            if on_record is not None:
                on_record(record)
        if record.get("reason") is not None:       # its own checks refused it (too big)
            dropped.append({"design": cand.name, "stage": "static", "reason": record["reason"]})
            solve_refused += 1
            continue
        designs.extend(evaluated_designs(cand, cost, record["rows"], spec, bound,
                                         record["wall_s"]))
    stages.append({"stage": "static", "designs_in": len(survivors),
                   "dropped": dominated + solve_refused, "seconds": time.perf_counter() - clock})

    front = pareto_front(designs, spec)
    feasible = [d for d in designs if d["feasible"]]
    best = min(feasible, key=lambda d: (d[key], d["watts"], -(d["margin"] or 0.0)),
               default=None)

    # the confirm stage: the feasible front, healthy, on the dynamic level (the items whose
    # phases are small enough for it: it steps every flow through time)
    clock = time.perf_counter()
    confirmed = 0
    items = confirm_items(base, collectives, spec.confirm.max_flows)
    scenarios = {cand.name: scenario for cand, scenario, _, _ in survivors}
    replay = {r["key"]: r for r in (done or []) if r.get("stage") == "confirm"}
    to_confirm = [d for d in front if d["feasible"]]
    if best is not None and best not in to_confirm:
        to_confirm.insert(0, best)
    for i, d in enumerate(to_confirm):
        d["dynamic_metric"] = None
        if not spec.confirm.dynamic:
            d["dynamic_note"] = "not run (confirm.dynamic: false)"
            continue
        if not items[0] and not items[1]:
            d["dynamic_note"] = ("not run: every item has a phase of more than "
                                 f"confirm.max_flows {spec.confirm.max_flows:,} flows")
            continue
        record_key = f"{d['design']} / {d['policy']}"
        record = replay.get(record_key)
        if record is None:
            if progress is not None:
                progress(f"confirming {record_key}", i, len(to_confirm))
            record = _confirm(scenarios[d["design"]], d, spec, analyze_fn, record_key, items)
            if on_record is not None:
                on_record(record)
        d["dynamic_metric"], d["dynamic_note"] = record["metric"], record["note"]
        confirmed += record["metric"] is not None
    if spec.upgrades and best is not None:
        best["upgrades"] = _upgrades(scenarios[best["design"]], best, analyze_fn)
    stages.append({"stage": "confirm", "designs_in": len(to_confirm),
                   "dropped": 0, "confirmed": confirmed,
                   "seconds": time.perf_counter() - clock})
    if progress is not None:
        progress("done", len(survivors), len(survivors))
    return DesignResult(base.name, spec, catalog, total, designs, dropped, best, front, stages,
                        time.perf_counter() - began)


def _static(cand: Candidate, scenario: Scenario, analyze_fn: Callable) -> dict:
    """The static level's rows for one candidate (a one-point sweep: the sweep's columns, its
    failure figures), or the reason its own checks refused it (e.g. the memory it needs)."""
    try:
        sweep = run_sweep([Point(cand.values, scenario)], analyze_fn=analyze_fn)
    except ScenarioError as err:          # run_sweep's field names the point; the message
        return {"stage": "static", "design": cand.name, "wall_s": 0.0, "rows": [],  # the rest
                "reason": err.message}
    return {"stage": "static", "design": cand.name, "wall_s": sweep.wall_s[0],
            "rows": sweep.rows}


def _upgrades(scenario: Scenario, design: dict, analyze_fn: Callable) -> list[dict]:
    """The links whose capacity would most shorten the design's binding item, from the
    healthy static solve's gradients (`study.sensitivity`): [{link, utilisation,
    us_saved_per_gbps}], best first; empty when no single link helps (NIC-bound)."""
    healthy = scenario.model_copy(update={"failures": None, "reliability": None,
                                          "policies": [design["policy"]]})
    try:
        report = analyze_fn(healthy, sensitivity=True)
    except ScenarioError:
        return []
    out = []
    for row in report.sensitivity or []:
        if row["workload"] != design["binding"]:
            continue
        for link in row["links"]:
            saved = link["d_time_d_gbps"]
            if saved is not None and saved < 0:
                out.append({"link": link["link"], "utilisation": link["utilisation"],
                            "us_saved_per_gbps": -saved * 1e6})
    return out[:3]


def confirm_items(base: Scenario, collectives: list, max_flows: int) -> tuple[list, list]:
    """(workload items, jobs) the dynamic level confirms: those whose every phase has at most
    `max_flows` fabric flows (jobs share the fabric, so they go all together or not at all)."""
    largest = [max((p.flows.num_flows for p in c.phases), default=0) for c in collectives]
    small = {(section, i) for (section, i, _), n in zip(base.items, largest) if n <= max_flows}
    workload = [w for i, w in enumerate(base.workload) if ("workload", i) in small]
    jobs = list(base.jobs) if all(("jobs", i) in small for i in range(len(base.jobs))) else []
    return workload, jobs


def _confirm(scenario: Scenario, design: dict, spec: DesignConfig, analyze_fn: Callable,
             key: str, items: tuple[list, list]) -> dict:
    """The dynamic level's healthy metric for one design (its worst confirmed item)."""
    workload, jobs = items
    solver = scenario.solver.model_copy(update={"model": "dynamic", "progressive": False})
    dynamic = scenario.model_copy(update={"solver": solver, "failures": None,
                                          "reliability": None, "workload": workload,
                                          "jobs": jobs, "policies": [design["policy"]]})
    metric = "slowdown" if spec.target.metric == "step_time_s" else spec.target.metric
    try:
        report = analyze_fn(dynamic)
    except ScenarioError as err:
        return {"stage": "confirm", "key": key, "metric": None,
                "note": f"not run: {err.message}"}
    values = [item_value({"fabric_slowdown": r.fabric_slowdown,
                          "completion_s": r.completion_s, "busbw_gbps": r.busbw_gbps},
                         metric, "healthy") for r in report.records]
    if any(v is None for v in values) or not values:
        return {"stage": "confirm", "key": key, "metric": None,
                "note": "the dynamic run did not finish every item"}
    names = ", ".join(r.workload for r in report.records)
    return {"stage": "confirm", "key": key, "metric": _worst(values, spec),
            "note": f"healthy {metric} of {names} on the dynamic level"}


def _target_text(spec: DesignConfig) -> str:
    target = spec.target
    bound = f"<= {target.max:g}" if target.max is not None else f">= {target.min:g}"
    where = "healthy" if target.quantile == "healthy" else f"at {target.quantile} over the " \
        "failure sets"
    return f"{target.metric} {bound} {where}"


def target_text(spec: DesignConfig) -> str:
    """The target as a sentence fragment: ``slowdown <= 1.05 at p99 over the failure sets``."""
    return _target_text(spec)


def order_of(base: Scenario, spec: DesignConfig) -> list[Candidate]:
    """The candidates in the order the search decides them (for the stream's header)."""
    kept, _ = enumerate_designs(base, spec, merged_catalog(spec.catalog))
    key = OBJECTIVE_KEYS[spec.objective]
    kept.sort(key=lambda k: (k[2][key], k[2]["watts"], k[0].index))
    return [c for c, _, _ in kept]


# --------------------------------------------------------------------------- output

DESIGN_COLUMNS = ("design", "switch", "tiers", "planes", "port_gbps", "radix",
                  "oversubscription", "evs", "policy", "cost_usd", "cost_switches_usd",
                  "cost_optics_usd", "cost_copper_usd", "cost_nics_usd", "switches",
                  "optic_modules", "watts", "watts_fabric", "metric", "bound",
                  "healthy_metric", "feasible", "margin", "binding", "problem",
                  "stalled_sets", "on_front", "dynamic_metric", "dynamic_note", "wall_s")
# besides DESIGN_COLUMNS, the best design's `upgrades` (design.upgrades: true) in the JSON


def design_rows(result: DesignResult) -> list[dict]:
    """One row per evaluated design (candidate x policy), the columns DESIGN_COLUMNS."""
    front = {(d["design"], d["policy"]) for d in result.front}
    return [{c: (((d["design"], d["policy"]) in front) if c == "on_front" else d.get(c))
             for c in DESIGN_COLUMNS} for d in result.designs]


def design_csv(result: DesignResult) -> str:
    """`design_rows` as CSV text (an empty cell: not known)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=DESIGN_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in design_rows(result):
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def design_dict(result: DesignResult) -> dict:
    """The search as JSON data: the target, `best`, `front`, every design, every drop and
    the time per stage."""
    def clean(d: dict | None) -> dict | None:
        if d is None:
            return None
        out = {c: d.get(c) for c in DESIGN_COLUMNS if c != "on_front"}
        if "upgrades" in d:
            out["upgrades"] = d["upgrades"]
        return out

    spec = result.spec
    return {"scenario": result.scenario, "versions": versions(),
            "target": {**spec.target.model_dump(), "text": target_text(spec)},
            "objective": spec.objective, "nic_gbps": spec.nic_gbps,
            "catalog_note": result.catalog.note, "candidates": result.candidates,
            "best": clean(result.best), "front": [clean(d) for d in result.front],
            "designs": design_rows(result), "dropped": result.dropped,
            "stages": result.stages, "total_s": result.total_s}


__all__ = ["DESIGN_COLUMNS", "STREAM_KIND", "Candidate", "DesignResult", "bundled_catalog",
           "design_csv", "design_dict", "design_header", "design_rows", "design_search",
           "enumerate_designs", "item_bounds", "merged_catalog", "order_of", "pareto_front",
           "price", "read_design_stream", "target_text"]
