"""Where each level is right against htsim, per case family: a markdown table from the logs
`compare.py` wrote (the rows counted as it counts them: median and maximum within the case's
target; the `double turn` rows left out).

    .venv/bin/python bench/fidelity/summary.py bench/fidelity/static_last_run.log \
        bench/fidelity/dynamic_last_run.log

A case belongs to the first family whose pattern matches its name; a log's later row for the
same (case, htsim run, level) replaces an earlier one, so a log of a few cases rerun can
follow a full one. `VALIDATION` lists the cases kept apart: no setting or mechanism was
chosen on them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FAMILIES = [
    ("one flow alone", r"^single_"),
    ("all-to-all (1:1 fat tree)", r"_a2a"),
    ("incast (32 or 16 to 1)", r"_incast"),
    ("8 planes x 100G, a plane degraded", r"^mp8_ls1024_deg0_"),
    ("8 planes x 100G, healthy", r"^mp8_"),
    ("4 planes, healthy", r"^mp4_"),
    ("degraded links, one plane (failure sets)", r"_failed\d"),
    ("oversubscribed 4:1 and 8:1", r"(4os|8os|ls1024os)_"),
    ("full bisection, one plane (permutations, rings)", r""),
]
# frozen: the first four kept apart when the 8-plane model was built, the rest added at once
# (new sizes, orders and fabrics of every family, make_matrices.py) and scored as they came
VALIDATION = ("mp8_ls1024_perm16MB", "mp8_ls1024_perm2MB_ev8", "mp8_ls1024_perm4MB_ev32",
              "mp8_ls1024_deg0_perm4MB_ev32",
              "ft128_1os_perm1MB", "ft128_4os_perm512KB", "ft128_8os_perm4MB",
              "ft128_1os_ring512KB", "ft128_1os_incast16", "ft128_1os_a2a32_256KB",
              "ls1024os_perm2MB", "ls1024os_failed4_perm512KB", "ls1024_failed8_perm2MB",
              "ls1024_ring2MB", "mp4_ls1024_perm512KB", "mp8_ls1024_deg0_perm2MB_ev8")
ROW = re.compile(r"^(\S+)\s+(ecmp|spray|mrc)\s+(\S+)\s+(static|dynamic)\s+(?:[-\d.]+\s+){6}"
                 r"([-+][\d.]+)%\s+([-+][\d.]+)%\s+([-+][\d.]+)%\s+(\d+)%\s+(yes|NO)\s*$")


def family(case: str) -> str:
    return next(name for name, pattern in FAMILIES if re.search(pattern, case))


def read(paths: list[Path]) -> dict:
    """{(case, htsim run, level): (err p50, err p99, err max, within)}, later rows winning."""
    rows = {}
    for path in paths:
        for line in path.read_text().splitlines():
            m = ROW.match(line)
            if m:
                rows[(m[1], m[3], m[4])] = (float(m[5]), float(m[6]), float(m[7]), m[9] == "yes")
    return rows


def table(rows: dict) -> list[str]:
    levels = ("static", "dynamic")
    out = ["| family | cases | rows | " + " | ".join(
        f"{lv} within | {lv} worst P50 / P99 / max" for lv in levels) + " |",
        "|---|---|---|" + "---|---|" * len(levels)]
    sets = [("calibration", lambda c: c not in VALIDATION),
            ("validation", lambda c: c in VALIDATION)]
    for label, keep in sets:
        for name, _ in FAMILIES:
            cases = sorted({c for c, _, _ in rows if family(c) == name and keep(c)})
            if not cases:
                continue
            cells = []
            for lv in levels:
                mine = [v for (c, _, l), v in rows.items() if l == lv and c in cases]
                if not mine:
                    cells += ["—", "—"]
                    continue
                worst = [max((v[i] for v in mine), key=abs) for i in range(3)]
                cells += [f"{sum(v[3] for v in mine)} of {len(mine)}",
                          " / ".join(f"{w:+.1f}%" for w in worst)]
            count = len({(c, r) for c, r, _ in rows if c in cases})
            out.append(f"| {name}{' (validation)' if label == 'validation' else ''} | "
                       f"{len(cases)} | {count} | " + " | ".join(cells) + " |")
    for label, keep in sets:
        for lv in levels:
            mine = [v for (c, _, l), v in rows.items() if l == lv and keep(c)]
            if mine:
                out.append(f"\n{label}, {lv}: {sum(v[3] for v in mine)} of {len(mine)} rows "
                           "within")
    return out


def main() -> int:
    print("\n".join(table(read([Path(p) for p in sys.argv[1:]]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
