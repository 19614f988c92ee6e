"""Writes scenarios/traces/megatron-16/: a small Chakra trace of one training step, made with
fabricjax's own writer (fabricjax.workload.et), for scenarios/chakra-example.yaml.

16 ranks as Megatron-LM orders them (tp 2, dp 4, pp 2; rank = t + 2 (d + 4 p)), 2 micro-
batches in GPipe order (all forwards, then all backwards): each micro-batch's forward runs a
tensor-parallel all-reduce and stage 0 sends the activation to stage 1; the backward runs the
all-reduce again and stage 1 sends the gradient back; then each data-parallel group
all-reduces its gradients.
Compute nodes sit between the communication (their durations are not modelled). Process
groups are named by integers (as ASTRA-sim wants) in comm_group.json, labelled by pg_desc.

Run from the repository root: python scenarios/traces/make_example.py
"""

from __future__ import annotations

import json
from pathlib import Path

from fabricjax.workload.et import Node, make_attribute, write_trace

TP, DP, PP, MICRO = 2, 4, 2, 2
ACTIVATION = 8 * 2**20          # bytes of one micro-batch's activation (b s h a)
GRADIENTS = 256 * 2**20         # bytes of gradients per GPU
FOLDER = Path(__file__).resolve().parent / "megatron-16"


def rank_of(t: int, d: int, p: int) -> int:
    return t + TP * (d + DP * p)


def groups() -> dict[str, tuple[str, list[int]]]:
    """{pg_name: (pg_desc, ranks)}."""
    out = {}
    for d in range(DP):
        for p in range(PP):
            out[str(len(out))] = ("tp", [rank_of(t, d, p) for t in range(TP)])
    for t in range(TP):
        for p in range(PP):
            out[str(len(out))] = ("dp", [rank_of(t, d, p) for d in range(DP)])
    for t in range(TP):
        for d in range(DP):
            out[str(len(out))] = ("pp", [rank_of(t, d, p) for p in range(PP)])
    return out


def rank_nodes(rank: int, table: dict) -> list:
    t, d, p = rank % TP, (rank // TP) % DP, rank // (TP * DP)
    mine = {desc: name for name, (desc, ranks) in table.items() if rank in ranks}
    peer = rank_of(t, d, 1 - p)
    nodes = []

    def add(name: str, kind: int, **attrs) -> None:
        deps = [nodes[-1].id] if nodes else []
        attr = [make_attribute(k, v) for k, v in attrs.items()]
        nodes.append(Node(id=len(nodes), name=name, type=kind, data_deps=deps, attr=attr,
                          duration_micros=100 if kind == 4 else 0))

    def coll(name: str, size: int, desc: str) -> None:
        add(name, 7, comm_type=0, comm_size=size, pg_name=mine[desc], pg_desc=desc)

    def p2p(name: str, send: bool) -> None:
        key = "comm_dst" if send else "comm_src"
        add(name, 5 if send else 6, comm_size=ACTIVATION // TP, **{key: peer},
            pg_name=mine["pp"], pg_desc="pp")

    for m in range(MICRO):
        if p == 1:
            p2p(f"recv activation {m}", send=False)
        add(f"forward {m}", 4)
        coll(f"tp all-reduce forward {m}", ACTIVATION, "tp")
        if p == 0:
            p2p(f"send activation {m}", send=True)
    for m in range(MICRO):
        if p == 0:
            p2p(f"recv gradient {m}", send=False)
        add(f"backward {m}", 4)
        coll(f"tp all-reduce backward {m}", ACTIVATION, "tp")
        if p == 1:
            p2p(f"send gradient {m}", send=True)
    coll("dp all-reduce gradients", GRADIENTS, "dp")
    return nodes


def main() -> None:
    FOLDER.mkdir(exist_ok=True)
    table = groups()
    for rank in range(TP * DP * PP):
        write_trace(FOLDER / f"step.{rank}.et", rank_nodes(rank, table))
    (FOLDER / "comm_group.json").write_text(
        json.dumps({name: ranks for name, (_, ranks) in table.items()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
