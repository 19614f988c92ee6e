"""Where htsim's flows lose time, beside the dynamic level: trims, resends, timeouts, REPS.

    STATS=1 SEEDS=1 LOGS=<dir> bash bench/fidelity/run_htsim.sh ls1024_failed8_perm1MB
    .venv/bin/python bench/fidelity/transport_stats.py --logs <dir> --case ls1024_failed8_perm1MB

With STATS set, `run_htsim.sh` runs htsim with the counters of `htsim_transport_stats.patch`
switched on (its events, and so every FCT, are unchanged) and keeps the logs in LOGS, not its
CSVs in results/. For every case and htsim run (seed 1 unless `--seed`) whose log is there,
this prints:

- per tier of queue (htsim's queue names without their numbers: `LS->US` a leaf's or ToR's
  uplink, `US->CS` an aggregation switch's uplink to a core, `CS->US` a core's downlink,
  `US->LS` a downlink to a leaf or ToR, `LS->DST` the last hop to a host), the share of the data
  packets that arrived there and were trimmed, and by when (to 50 us) half and 90% of those
  trims had come (a start-up burst, or trims all along);
- per flow: NACKs (a trim each; mean, standard deviation, largest), resent packets and
  retransmission timeouts (means), and how closely the FCTs follow the NACKs (Pearson's r);
- the ACKs that came back per packet sent, clean and marked, and the share of the packets
  that asked for an ACK at once (the AR flag: a packet that fills the window or ends the
  backlog), over all flows and over the slowest tenth; the receiver otherwise ACKs every
  16 KiB and every marked packet, so this says how often a flow's window hears back;
- how often quick adapt fired (the window set to what came back in an interval), on how many
  of the flows and how often a flow, over all flows and over the slowest tenth (logs written
  before that counter have no such line);
- for REPS: the share of packets sent on a recycled EV, on a random one and while frozen (a
  timeout freezes the buffer), and how many timeouts froze one.

Unless `--model none`, the dynamic level runs the same matrix and prints its trimmed and
twice-sent packets per flow the same way (its bytes over the scenario's wire bytes per packet,
4,160 as htsim's -mtu), and the same correlation: whether the model loses its time where htsim
does. A multi-plane case's runs are one log per plane (`..._p<plane>.log`); they are not read.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402
from fabricjax.engine.timing import packet_bytes  # noqa: E402

BIN_US = 50                   # htsim_transport_stats.patch counts trims per 50 us
FINISHED = re.compile(r"Flow (Uec_\d+_\d+) flowId (\d+) .*finished at (\S+)")
FLOW = re.compile(r"flowstats (\S+) new (\d+) resent (\d+) timeouts (\d+) nacks (\d+)"
                  r"(?: ar (\d+) ecnacks (\d+) goodacks (\d+))?(?: qa (\d+))?")
TIER = re.compile(r"trims (\S+) arrivals (\d+) trimmed (\d+) per_50us(.*)")
REPS = re.compile(r"reps ((?:\w+ \d+ ?)+)")


class HtsimStats(NamedTuple):
    """One htsim log's counters. fct_us: float[F]; counters: int[F, 4] (new packets, resent,
    timeouts, NACKs), both in flow-name order; tiers: {tier: (arrivals, trimmed, trims per
    BIN_US of simulated time)}; reps: {counter: total} of a REPS run, else empty; acks:
    int[F, 3] (packets sent with the AR flag, marked ACKs, clean ACKs), or None where the log
    predates those counters; ids: int[F], htsim's flowId of each row; quick_adapts: int[F],
    the times quick adapt cut each flow's window, or None where the log predates it."""

    fct_us: np.ndarray
    counters: np.ndarray
    tiers: dict[str, tuple[int, int, tuple[int, ...]]]
    reps: dict[str, int]
    acks: np.ndarray | None
    ids: np.ndarray
    quick_adapts: np.ndarray | None


def read_log(path: Path) -> HtsimStats:
    """The counters of one htsim log written with STATS set (stdout and stderr together)."""
    finished, ids, counters, acks, adapts, tiers, reps = {}, {}, {}, {}, {}, {}, {}
    with open(path, errors="replace") as log:
        for line in log:
            if m := FINISHED.match(line):
                finished[m[1]] = float(m[3])
                ids[m[1]] = int(m[2])
            elif m := FLOW.match(line):
                counters[m[1]] = [int(m[i]) for i in range(2, 6)]
                if m[6] is not None:
                    acks[m[1]] = [int(m[i]) for i in range(6, 9)]
                if m[9] is not None:
                    adapts[m[1]] = int(m[9])
            elif m := TIER.match(line):
                bins = [int(pair.split("/")[0]) for pair in m[4].split()]
                tiers[m[1]] = (int(m[2]), int(m[3]), tuple(bins))
            elif m := REPS.match(line):
                words = m[1].split()
                reps = {key: int(value) for key, value in zip(words[::2], words[1::2])}
    names = sorted(finished)
    if not names or any(name not in counters for name in names):
        raise SystemExit(f"{path}: no per-flow counters (was it run with STATS set?)")
    return HtsimStats(np.array([finished[n] for n in names]),
                      np.array([counters[n] for n in names]), tiers, reps,
                      np.array([acks[n] for n in names]) if all(n in acks for n in names)
                      else None, np.array([ids[n] for n in names]),
                      np.array([adapts[n] for n in names]) if all(n in adapts for n in names)
                      else None)


def correlation(a: np.ndarray, b: np.ndarray) -> str:
    """Pearson's r of two per-flow columns ("-" where either is constant)."""
    if a.std() == 0 or b.std() == 0:
        return "-"
    return f"{np.corrcoef(a, b)[0, 1]:+.2f}"


HEADER = (f"{'case':<24} {'run':<11} {'by':<6} {'trims/flow':>10} {'sd':>6} {'max':>4} "
          f"{'resent':>7} {'timeouts':>8} {'twice':>6} {'corr(FCT, trims)':>16}")


def row(case: str, run: str, by: str, trims: np.ndarray, resent: float, timeouts: str,
        twice: str, fct: np.ndarray) -> str:
    return (f"{case:<24} {run:<11} {by:<6} {trims.mean():10.2f} {trims.std():6.2f} "
            f"{trims.max():4.0f} {resent:7.2f} {timeouts:>8} {twice:>6} "
            f"{correlation(fct, trims):>16}")


def htsim_lines(case: str, run: str, stats: HtsimStats) -> list[str]:
    """The run's per-flow row, then its trims per tier and REPS's EV sources."""
    _, resent, timeouts, nacks = stats.counters.T
    slowest = np.argsort(stats.fct_us)[-max(len(stats.fct_us) // 10, 1):]    # the last tenth
    lines = [row(case, run, "htsim", nacks, resent.mean(), f"{timeouts.mean():.2f}", "-",
                 stats.fct_us)]
    for tier, (arrivals, trimmed, bins) in sorted(stats.tiers.items()):
        if trimmed:
            by = np.cumsum(bins)
            half, most = ((np.searchsorted(by, share * trimmed) + 1) * BIN_US
                          for share in (0.5, 0.9))
            lines.append(f"{'':<43}{tier:<8} trimmed {trimmed / arrivals:6.2%} of {arrivals} "
                         f"packets, half of them by {half} us, 90% by {most} us")
    if stats.acks is not None:
        sent = stats.counters[:, 0] + stats.counters[:, 1]
        for label, flows in (("all flows", slice(None)), ("slowest tenth", slowest)):
            ar, marked, clean = stats.acks[flows].sum(0) / max(sent[flows].sum(), 1)
            lines.append(f"{'':<43}ACKs    per packet sent, {label + ':':<14} clean {clean:.3f}, "
                         f"marked {marked:.3f}; AR on {ar:5.1%} of the packets")
    if stats.quick_adapts is not None:
        adapts = stats.quick_adapts
        lines.append(f"{'':<43}QA      quick adapt fired on {np.mean(adapts > 0):.0%} "
                     f"of the flows, {adapts.mean():.2f} times a flow (slowest tenth: "
                     f"{np.mean(adapts[slowest] > 0):.0%}, {adapts[slowest].mean():.2f})")
    if stats.reps.get("packets"):
        total = stats.reps["packets"]
        lines.append(f"{'':<43}REPS    recycled {stats.reps['recycled'] / total:5.1%}, "
                     f"random {stats.reps['random'] / total:5.1%}, frozen "
                     f"{stats.reps['frozen'] / total:5.1%} of {total} packets; "
                     f"{stats.reps['freezes']} freezes")
    return lines


def model_line(case: str, policy: str, outcome, packet: float) -> str:
    """The dynamic level's per-flow row: trimmed and twice-sent packets (its bytes over
    `packet` wire bytes); it resends every trimmed byte and has no timer but the spurious one."""
    trimmed = outcome.trimmed_bytes / packet
    twice = outcome.duplicated_bytes / packet
    return row(case, policy, "model", trimmed, float((trimmed + twice).mean()), "-",
               f"{twice.mean():.2f}", outcome.fct_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    build = Path(os.environ.get("HTSIM_BUILD", compare.HERE.parents[2] / "htsim_build"))
    parser.add_argument("--logs", type=Path, default=Path(os.environ.get("LOGS", build / "logs")),
                        help="run_htsim.sh's LOGS of a STATS run [$LOGS, else $HTSIM_BUILD/logs]")
    parser.add_argument("--case", action="append", choices=sorted(compare.CASES),
                        help="cases to show (default: every case with a log)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model", choices=["dynamic", "none"], default="dynamic",
                        help="fabricjax's dynamic level beside htsim's runs, or none")
    args = parser.parse_args()
    found = {}
    for case in args.case or list(compare.CASES):
        logs = {run: args.logs / f"{case}_{run}_s{args.seed}.log"
                for runs in compare.POLICIES.values() for run in runs}
        logs = {run: path for run, path in logs.items() if path.exists()}
        if logs:
            found[case] = logs
    if not found:
        raise SystemExit(f"no htsim logs of seed {args.seed} in {args.logs} "
                         "(run_htsim.sh with STATS=1 and LOGS writes them)")
    print("packets per flow (trims: mean, standard deviation, largest; resent, timeouts and sent "
          "twice: mean)")
    print(HEADER)
    print("-" * len(HEADER))
    with tempfile.TemporaryDirectory() as tmp:
        for case, logs in found.items():
            for run, path in logs.items():
                print("\n".join(htsim_lines(case, run, read_log(path))))
            if args.model == "none":
                continue
            policies = [policy for policy, runs in compare.POLICIES.items()
                        if any(run in logs for run in runs)]
            scenario, _, outcomes = compare.dynamic_outcomes(case, args.seed, Path(tmp),
                                                             policies=policies)
            for policy, (outcome, _) in outcomes.items():
                print(model_line(case, policy, outcome, packet_bytes(scenario)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
