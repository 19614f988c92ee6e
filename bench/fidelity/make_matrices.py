"""The calibration cases' connection matrices, in htsim's format (numpy only, deterministic).

    python3 bench/fidelity/make_matrices.py          # writes bench/fidelity/matrices/*.cm

One file per case and seed, `matrices/<case>_s<seed>.cm`: ``Nodes N``, ``Connections C``,
then ``S->D id I start 0 size B`` (every flow starts at time 0). htsim runs them with
`run_htsim.sh`; fabricjax imports the same files (`collective: traffic`, `format: htsim`) in
`compare.py`. The calibration cases:

- permutations (each host sends to one other host and receives from one; no fixed point) of
  2 MiB flows on the 128-host fat trees at 1:1, 4:1 and 8:1, of 128 KiB flows on the 1:1 one,
  and of 1 MiB flows on the 1,024-host leaf-spine (also run with `-failed 4`);
- an incast: 32 distinct random senders to one random other host, 1 MiB each (1:1 tree);
- an all-to-all: every ordered pair of the 128 hosts, 64 KiB each (1:1 tree; it has no
  randomness, so every seed's file holds the same matrix: the seeds differ only in htsim's
  `-seed`). Every host's connections are listed from host 0 up, and htsim's NIC serves its
  connections in the order they start, so the hosts send to the same receiver at about the
  same turn, and to one pod's 16 hosts for 16 turns in a row;
- the same all-to-all in shifted order (`ft128_1os_a2a_shift`): host s lists s + 1, s + 2,
  ... (mod 128), the order a collective library schedules an all-to-all in, so at each turn
  the hosts send to distinct receivers;
- one flow between pods (unloaded FCT: latency and headers alone), 2 MiB and 128 KiB.

Cases that cover the multi-plane fabric the product is for, degraded links, short flows and
collective steps:

- `mp4_ls1024_*`: a fabric of 4 planes, each a full-bisection 1,024-host leaf-spine (htsim's
  `leaf_spine_1024.topo`; fabricjax's `multiplane-clos` with radix 64). htsim has no planes, so
  `run_htsim.sh` runs each plane on its own with `per_plane/<case>_s<seed>.cm`: the same
  connections with 1/4 of every flow's bytes (see HTSIM.md). A permutation of 2 MiB flows, and
  one step of a ring all-reduce of 1 GiB over the 1,024 GPUs in rank order (every GPU sends
  1 MiB to the next; 31 of every 32 flows stay under their T0);
- `ls1024_*`: one such plane alone, a permutation of 1 MiB flows, healthy and with `-failed 8`
  (a quarter of every leaf's uplinks at 25% speed);
- `mp8_ls1024_*`: the mission's fabric, 8 planes of the same plane, permutations of 1 MiB and
  8 MiB flows (128 KiB and 1 MiB a plane, 16 EVs a plane); `mp8_ls1024_deg0_*` the 8 MiB one's
  very flows with plane 0 degraded as `ls1024_failed8` is (fabricjax runs it as a failure
  set); and, kept for validation (no setting was chosen on them), 16 MiB flows at 16 EVs a
  plane, 2 MiB at 8 (`_ev8`: a case's EVs a plane, else 128 / planes) and 4 MiB at 32, that
  one also with plane 0 degraded;
- short flows on the 1:1 fat tree: permutations of 64 KiB and 512 KiB flows, and one whose
  flows are 64, 128, 256 or 512 KiB at random;
- one step of a ring all-reduce of 256 MiB over the 128 hosts of the 1:1 fat tree taken in a
  random order (a job scattered over the cluster): a single-cycle permutation of 2 MiB flows.

The frozen validation set, never tuned on (each from a random stream of its own): permutations
of 1 MiB on the 1:1 fat tree, 512 KiB on the 4:1 one and 4 MiB on the 8:1 one; a scattered ring
step of 512 KiB; an incast of 16 senders of 2 MiB; an all-to-all of 256 KiB among 32 random
hosts in shifted order; on the 1,024-host leaf-spines a 2 MiB permutation (oversubscribed), a
512 KiB one with `-failed 4` (oversubscribed), a 2 MiB one with `-failed 8`, a scattered ring
step of 2 MiB, a 512 KiB permutation over 4 planes, and the 2 MiB, 8-EV 8-plane case with plane
0 degraded.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEEDS = (1, 2, 3)
KIB = 2**10
MIB = 2**20


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of 0..n-1 with no fixed point (by rejection)."""
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


def permutation(n: int, size: int, rng) -> list[tuple[int, int, int]]:
    dst = derangement(n, rng)
    return [(s, int(d), size) for s, d in enumerate(dst)]


def incast(n: int, senders: int, size: int, rng) -> list[tuple[int, int, int]]:
    hosts = rng.permutation(n)
    receiver = int(hosts[0])
    return [(int(s), receiver, size) for s in hosts[1:senders + 1]]


def mixed_permutation(n: int, sizes: tuple[int, ...], rng) -> list[tuple[int, int, int]]:
    dst = derangement(n, rng)
    return [(s, int(d), int(rng.choice(sizes))) for s, d in enumerate(dst)]


def ring_step(n: int, size: int, rng=None) -> list[tuple[int, int, int]]:
    """One step of a ring over the hosts in rank order (`rng` None) or in a random order:
    every rank sends `size` bytes to the next."""
    order = np.arange(n) if rng is None else rng.permutation(n)
    return [(int(order[r]), int(order[(r + 1) % n]), size) for r in range(n)]


def all_to_all(n: int, size: int, rng) -> list[tuple[int, int, int]]:
    return [(s, d, size) for s in range(n) for d in range(n) if s != d]


def subset_all_to_all(n: int, members: int, size: int, rng) -> list[tuple[int, int, int]]:
    """An all-to-all among `members` hosts drawn at random from the n (a job scattered over
    the cluster), each host's peers in shifted order (the next member on)."""
    hosts = [int(h) for h in rng.choice(n, members, replace=False)]
    return [(hosts[i], hosts[(i + k) % members], size)
            for i in range(members) for k in range(1, members)]


def shifted_all_to_all(n: int, size: int, rng=None) -> list[tuple[int, int, int]]:
    """Every ordered pair, each host's peers listed from the next host on: (s, s + k mod n)
    for k = 1 .. n - 1."""
    return [(s, (s + k) % n, size) for s in range(n) for k in range(1, n)]


# case: (hosts, traffic, seeds, stream): the stream picks the random draws, so each degraded
# leaf-spine case runs the very matrices of its healthy one
CASES = {
    "ft128_1os_perm2MB": (128, lambda rng: permutation(128, 2 * MIB, rng), SEEDS, 0),
    "ft128_4os_perm2MB": (128, lambda rng: permutation(128, 2 * MIB, rng), SEEDS, 1),
    "ft128_8os_perm2MB": (128, lambda rng: permutation(128, 2 * MIB, rng), SEEDS, 2),
    "ft128_1os_perm128KB": (128, lambda rng: permutation(128, 128 * 1024, rng), SEEDS, 3),
    "ls1024os_perm1MB": (1024, lambda rng: permutation(1024, MIB, rng), SEEDS, 4),
    "ls1024os_failed4_perm1MB": (1024, lambda rng: permutation(1024, MIB, rng), SEEDS, 4),
    "ft128_1os_incast32": (128, lambda rng: incast(128, 32, MIB, rng), SEEDS, 6),
    "ft128_1os_a2a": (128, lambda rng: all_to_all(128, 64 * 1024, rng), SEEDS, 7),
    # host 0 (pod 0) to host 100 (pod 6): 6 links, nothing else on the fabric
    "single_2MB": (128, lambda rng: [(0, 100, 2 * MIB)], (1,), 8),
    "single_128KB": (128, lambda rng: [(0, 100, 128 * 1024)], (1,), 9),
    "mp4_ls1024_perm2MB": (1024, lambda rng: permutation(1024, 2 * MIB, rng), SEEDS, 10),
    "mp4_ls1024_ring1MB": (1024, lambda rng: ring_step(1024, MIB), SEEDS, 11),
    "ls1024_perm1MB": (1024, lambda rng: permutation(1024, MIB, rng), SEEDS, 12),
    "ls1024_failed8_perm1MB": (1024, lambda rng: permutation(1024, MIB, rng), SEEDS, 12),
    "ft128_1os_perm64KB": (128, lambda rng: permutation(128, 64 * KIB, rng), SEEDS, 13),
    "ft128_1os_perm512KB": (128, lambda rng: permutation(128, 512 * KIB, rng), SEEDS, 14),
    "ft128_1os_permmix": (128, lambda rng: mixed_permutation(
        128, (64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB), rng), SEEDS, 15),
    "ft128_1os_ring2MB": (128, lambda rng: ring_step(128, 2 * MIB, rng), SEEDS, 16),
    "ft128_1os_a2a_shift": (128, lambda rng: shifted_all_to_all(128, 64 * KIB), SEEDS, 17),
    # the mission's fabric as built: 8 planes x 100G, each a full-bisection 1,024-host plane
    # (two seeds: eight planes are eight htsim runs a policy)
    "mp8_ls1024_perm1MB": (1024, lambda rng: permutation(1024, MIB, rng), SEEDS[:2], 18),
    "mp8_ls1024_perm8MB": (1024, lambda rng: permutation(1024, 8 * MIB, rng), SEEDS[:2], 19),
    # the same flows with plane 0 degraded as `ls1024_failed8` is (its planes 1-7 are the
    # healthy case's runs)
    "mp8_ls1024_deg0_perm8MB": (1024, lambda rng: permutation(1024, 8 * MIB, rng), SEEDS[:2],
                                19),
    # validation of the 8-plane model, never tuned on: 16 MiB at 16 EVs a plane, 2 MiB at 8,
    # 4 MiB at 32 (256 EVs a flow), and the last with plane 0 degraded
    "mp8_ls1024_perm16MB": (1024, lambda rng: permutation(1024, 16 * MIB, rng), SEEDS[:2], 20),
    "mp8_ls1024_perm2MB_ev8": (1024, lambda rng: permutation(1024, 2 * MIB, rng), SEEDS[:2],
                               21),
    "mp8_ls1024_perm4MB_ev32": (1024, lambda rng: permutation(1024, 4 * MIB, rng), SEEDS[:2],
                                22),
    "mp8_ls1024_deg0_perm4MB_ev32": (1024, lambda rng: permutation(1024, 4 * MIB, rng),
                                     SEEDS[:2], 22),
    # the frozen validation set (bench/fidelity/summary.py, VALIDATION): new sizes, orders and
    # fabrics of every family, drawn from streams no calibration case uses, scored once and
    # never tuned on
    "ft128_1os_perm1MB": (128, lambda rng: permutation(128, MIB, rng), SEEDS, 23),
    "ft128_4os_perm512KB": (128, lambda rng: permutation(128, 512 * KIB, rng), SEEDS, 24),
    "ft128_8os_perm4MB": (128, lambda rng: permutation(128, 4 * MIB, rng), SEEDS, 25),
    "ft128_1os_ring512KB": (128, lambda rng: ring_step(128, 512 * KIB, rng), SEEDS, 26),
    "ft128_1os_incast16": (128, lambda rng: incast(128, 16, 2 * MIB, rng), SEEDS, 27),
    "ft128_1os_a2a32_256KB": (128, lambda rng: subset_all_to_all(128, 32, 256 * KIB, rng),
                              SEEDS, 28),
    "ls1024os_perm2MB": (1024, lambda rng: permutation(1024, 2 * MIB, rng), SEEDS, 29),
    "ls1024os_failed4_perm512KB": (1024, lambda rng: permutation(1024, 512 * KIB, rng), SEEDS,
                                   30),
    "ls1024_failed8_perm2MB": (1024, lambda rng: permutation(1024, 2 * MIB, rng), SEEDS, 31),
    "ls1024_ring2MB": (1024, lambda rng: ring_step(1024, 2 * MIB, rng), SEEDS, 32),
    "mp4_ls1024_perm512KB": (1024, lambda rng: permutation(1024, 512 * KIB, rng), SEEDS, 33),
    # the 2 MiB, 8-EV case's very flows with plane 0 degraded (planes 1-7: its runs)
    "mp8_ls1024_deg0_perm2MB_ev8": (1024, lambda rng: permutation(1024, 2 * MIB, rng),
                                    SEEDS[:2], 21),
}


def planes(case: str) -> int:
    """A case's planes: P for a case named `mp<P>_...`, else 1."""
    return int(case[2:case.index("_")]) if case.startswith("mp") else 1


def write(path: Path, hosts: int, flows: list[tuple[int, int, int]]) -> None:
    lines = [f"Nodes {hosts}", f"Connections {len(flows)}"]
    lines += [f"{s}->{d} id {i} start 0 size {b}" for i, (s, d, b) in enumerate(flows, 1)]
    path.write_text("\n".join(lines) + "\n")


def main(out: Path = HERE / "matrices") -> None:
    out.mkdir(exist_ok=True)
    for case, (hosts, traffic, seeds, stream) in CASES.items():
        for seed in seeds:
            flows = traffic(np.random.default_rng([17, stream, seed]))
            write(out / f"{case}_s{seed}.cm", hosts, flows)
            if planes(case) > 1:
                # each plane carries an equal share of every flow (whole packets: the sizes
                # are multiples of planes x 4 KiB)
                assert all(b % (planes(case) * 4 * KIB) == 0 for _, _, b in flows), case
                (out / "per_plane").mkdir(exist_ok=True)
                write(out / "per_plane" / f"{case}_s{seed}.cm", hosts,
                      [(s, d, b // planes(case)) for s, d, b in flows])
    print(f"wrote {len(list(out.rglob('*.cm')))} matrices to {out}")


if __name__ == "__main__":
    main()
