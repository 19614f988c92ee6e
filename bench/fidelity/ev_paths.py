"""The dynamic level on htsim's own EVs, flow by flow: what is left of a sprayed row's error
once both sides send every flow's EVs on the same paths.

    HTSIM_BUILD=<build> LOGS=<dir> STATS=1 EV_ROUTES=1 SEEDS=1 \\
        POLICIES="spray mrc_reps mrc_bitmap" bash bench/fidelity/run_htsim.sh <case ...>
    .venv/bin/python bench/fidelity/ev_paths.py --logs <dir> --case <case> [--seed 1]

compare.py runs spray and mrc on fabricjax's own hashed EVs: with 128 EVs a flow the two hash
draws are alike in distribution, but not flow by flow, so its rows compare tails, never flows.
With EV_ROUTES, htsim's log holds every (flow, EV)'s switch choices (the route-dump patch);
this script gives each flow's EV k the equal-cost path htsim's switches hashed EV k to (htsim's
entropy modulo its 128 paths; an EV that htsim never sent on, as REPS leaves some, keeps
fabricjax's draw) and runs the dynamic level on those slots. For each sprayed run of a
single-plane case it prints:

- the median and max of htsim, of the dynamic level on fabricjax's EVs (compare.py's row)
  and on htsim's;
- flow by flow, the rank correlation of the dynamic level's FCTs with htsim's, on each draw;
- per flow, htsim's NACKs against the dynamic level's trimmed packets (mean, standard
  deviation, Pearson's r), and on each side the least-squares line FCT = a + b x trims with the
  standard deviation of what it leaves;
- htsim's 20 slowest flows: their mean FCT, NACKs and trims on both sides.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402
import transport_stats  # noqa: E402
from fabricjax.engine.dynamic import solve_dynamic_phase  # noqa: E402
from fabricjax.engine.phase import initial_slots  # noqa: E402
from fabricjax.engine.timing import packet_bytes  # noqa: E402
from fabricjax.policies import get as get_policy  # noqa: E402
from fabricjax.policies.base import Slots  # noqa: E402

EV_ROUTE = re.compile(r"evroute (\d+) (\d+) .*?\b(LS|US|CS)_?(\d+)->(LS|US|CS)_?(\d+)\(")
RUNS = {"spray": "spray", "mrc_reps": "mrc", "mrc_bitmap": "mrc"}
TOP = 20


def ev_hops(log: Path, topo: str, paths: int) -> dict[int, dict[int, set]]:
    """{htsim flowId: {EV: the hops its switches chose}} from a log written with EV_ROUTES.
    An EV is htsim's entropy modulo `paths` (a power of 2): the sender sets the bits above."""
    hops: dict[int, dict[int, set]] = {}
    with open(log, errors="replace") as fh:
        for line in fh:
            if m := EV_ROUTE.match(line):
                hop = (compare.switch_name(topo, m[3] + m[4]),
                       compare.switch_name(topo, m[5] + m[6]))
                hops.setdefault(int(m[1]), {}).setdefault(int(m[2]) & (paths - 1),
                                                          set()).add(hop)
    return hops


def htsim_ev_slots(case: str, seed: int, fabric, flows, slots: Slots, log: Path,
                   candidates: list[list[set]] | None = None) -> tuple[Slots, int]:
    """`slots` with every EV that htsim sent on moved to htsim's path for it, and how many.
    `candidates`: `compare.candidate_hops(fabric, flows)`, where the caller already has it."""
    choice = np.array(slots.choice, copy=True)
    paths = choice.shape[1]
    if paths & (paths - 1):
        raise SystemExit(f"{case}: {paths} EVs a flow, not a power of 2 as htsim's are")
    hops = ev_hops(log, compare.CASES[case][0], paths)
    if candidates is None:
        candidates = compare.candidate_hops(fabric, flows)
    moved = 0
    for f, flow_id in enumerate(compare.matrix_ids(case, seed)):
        for ev, chosen in hops.get(flow_id, {}).items():
            choice[f, ev] = compare.candidate_of(candidates[f], chosen,
                                                 f"{case} seed {seed}: flow {flow_id} EV {ev}")
            moved += 1
    return Slots(slots.plane, choice, slots.state), moved


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ranks by order; ties broken by position)."""
    ra, rb = (np.argsort(np.argsort(x)).astype(np.float64) for x in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def line_fit(trims: np.ndarray, fct: np.ndarray) -> str:
    """'a + b x trims (sd of the rest)' of the least-squares line, in us."""
    design = np.c_[trims, np.ones_like(trims)]
    (slope, intercept), *_ = np.linalg.lstsq(design, fct, rcond=None)
    rest = fct - design @ (slope, intercept)
    return f"{intercept:6.1f} + {slope:5.2f} x trims (rest sd {rest.std():5.1f})"


class CasePhase:
    """A case's phase, built once for all its runs: the scenario, fabric, flows and stream,
    htsim's flow ids, the equal-cost candidates' hops, and the dynamic level's outcome on
    fabricjax's own EVs per policy (mrc's serves both the REPS and the bitmap run)."""

    def __init__(self, case: str, seed: int, workdir: Path):
        self.case, self.seed = case, seed
        # the stored candidate paths: a degraded case as its edge list (compare.GRAPHS)
        self.scenario, self.fabric, self.flows, self.stream, _ = compare.case_phase(
            case, seed, workdir, graph=compare.CASES[case][0] in compare.GRAPHS)
        self.ids = compare.matrix_ids(case, seed)
        self.candidates = compare.candidate_hops(self.fabric, self.flows)
        self._own: dict = {}

    def own(self, policy: str):
        if policy not in self._own:
            self._own[policy] = solve_dynamic_phase(policy, self.scenario, self.fabric,
                                                    self.flows, self.stream)
        return self._own[policy]


def run_lines(phase: CasePhase, run: str, log: Path) -> list[str]:
    """The run's lines: htsim beside the dynamic level on both draws of the EVs."""
    case, seed = phase.case, phase.seed
    scenario, fabric, flows, stream, ids = (phase.scenario, phase.fabric, phase.flows,
                                            phase.stream, phase.ids)
    stats = transport_stats.read_log(log)
    row = {flow_id: i for i, flow_id in enumerate(stats.ids)}
    if sorted(row) != sorted(ids):
        raise SystemExit(f"{log}: its flows are not the matrix's of {case} seed {seed}")
    order = np.array([row[flow_id] for flow_id in ids])
    sending = flows.size > 0
    h_fct = stats.fct_us[order][sending]
    h_nacks = stats.counters[order, 3][sending].astype(np.float64)
    policy = RUNS[run]
    own = phase.own(policy)
    base = initial_slots(get_policy(policy), scenario, fabric, flows, stream)
    slots, moved = htsim_ev_slots(case, seed, fabric, flows, base, log, phase.candidates)
    if not moved:
        raise SystemExit(f"{log}: no evroute lines (run_htsim.sh with STATS=1 and "
                         "EV_ROUTES=1 writes them)")
    same = solve_dynamic_phase(policy, scenario, fabric, flows, stream, slots=slots)
    if own.status or same.status:
        raise SystemExit(f"{case} seed {seed}: {policy}'s dynamic run hit its step bound")
    packet = packet_bytes(scenario)
    top = np.argsort(h_fct)[-TOP:]
    lines = [f"{case} {run}: htsim's EVs for {moved} of {base.choice.size} slots "
             f"({flows.num_flows} flows x {base.choice.shape[1]} EVs)"]
    lines.append(f"  {'':<22}{'p50':>8}{'max':>8}{'rank r':>8}  FCT (us) against trims"
                 f"{'':<12}trims/flow  r(NACKs)  htsim's {TOP} slowest: FCT, trims")
    lines.append(f"  {'htsim':<22}{compare.quantiles(h_fct)[0]:8.1f}{h_fct.max():8.1f}{'':>8}  "
                 f"{line_fit(h_nacks, h_fct)}  {h_nacks.mean():5.1f} ± {h_nacks.std():4.1f}"
                 f"{'':>10}{h_fct[top].mean():10.1f} {h_nacks[top].mean():6.1f}")
    for label, outcome in (("dynamic, own EVs", own), ("dynamic, htsim's EVs", same)):
        fct = outcome.fct_s[sending] * 1e6
        trims = outcome.trimmed_bytes[sending] / packet
        r_nacks = transport_stats.correlation(h_nacks, trims)
        lines.append(f"  {label:<22}{compare.quantiles(fct)[0]:8.1f}{fct.max():8.1f}"
                     f"{rank_correlation(h_fct, fct):8.2f}  {line_fit(trims, fct)}  "
                     f"{trims.mean():5.1f} ± {trims.std():4.1f}{r_nacks:>10}"
                     f"{fct[top].mean():10.1f} {trims[top].mean():6.1f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    build = Path(os.environ.get("HTSIM_BUILD", compare.HERE.parents[2] / "htsim_build"))
    parser.add_argument("--logs", type=Path, default=Path(os.environ.get("LOGS", build / "logs")),
                        help="run_htsim.sh's LOGS of a STATS and EV_ROUTES run [$LOGS, else "
                             "$HTSIM_BUILD/logs]")
    parser.add_argument("--case", action="append", required=True, choices=sorted(
        case for case in compare.CASES if not case.startswith("mp")),
                        help="single-plane cases to show")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("FCTs in us; rank r: Spearman's, flow by flow, against htsim; trims: htsim's NACKs, "
          "the dynamic level's trimmed packets")
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.case:
            logs = {run: args.logs / f"{case}_{run}_s{args.seed}.log" for run in RUNS}
            logs = {run: log for run, log in logs.items() if log.exists()}
            if not logs:
                continue
            phase = CasePhase(case, args.seed, Path(tmp))
            for run, log in logs.items():
                print("\n".join(run_lines(phase, run, log)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
