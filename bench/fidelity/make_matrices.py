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
  `-seed`);
- one flow between pods (unloaded FCT: latency and headers alone), 2 MiB and 128 KiB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEEDS = (1, 2, 3)
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


def all_to_all(n: int, size: int, rng) -> list[tuple[int, int, int]]:
    return [(s, d, size) for s in range(n) for d in range(n) if s != d]


# case: (hosts, traffic, seeds, stream): the stream picks the random draws, so the degraded
# leaf-spine case runs the very matrices of the healthy one
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
}


def write(path: Path, hosts: int, flows: list[tuple[int, int, int]]) -> None:
    lines = [f"Nodes {hosts}", f"Connections {len(flows)}"]
    lines += [f"{s}->{d} id {i} start 0 size {b}" for i, (s, d, b) in enumerate(flows, 1)]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    out = HERE / "matrices"
    out.mkdir(exist_ok=True)
    for case, (hosts, traffic, seeds, stream) in CASES.items():
        for seed in seeds:
            flows = traffic(np.random.default_rng([17, stream, seed]))
            write(out / f"{case}_s{seed}.cm", hosts, flows)
    print(f"wrote {len(list(out.glob('*.cm')))} matrices to {out}")


if __name__ == "__main__":
    main()
