"""Chakra execution traces: the writer/reader round trip (`workload.et`), the phases a small
hand-built trace becomes (dependency levels, concurrent collectives step by step, sizes as
nccl-tests means them), one clear refusal per kind of bad trace, and the bundled example."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from fabricjax.core.errors import ScenarioError
from fabricjax.scenario import load_scenario
from fabricjax.workload.build import build_workload
from fabricjax.workload.chakra import chakra_step, load_trace
from fabricjax.workload.collectives import Servers
from fabricjax.workload.et import (GlobalMetadata, Node, attribute, encode_stream,
                                   make_attribute, read_trace, write_trace)
from test_cli import fabricjax

REPO = Path(__file__).resolve().parents[1]
FLAT = Servers(1 << 30, 1 << 30, 0.0)
COMP, SEND, RECV, COLL = 4, 5, 6, 7
ALL_REDUCE, ALL_GATHER, ALL_TO_ALL = 0, 2, 6


class Rank:
    """Builds one rank's node list: each node depends on the previous one (a chain)."""

    def __init__(self):
        self.nodes = []

    def add(self, kind: int, name: str = "", deps=None, **attrs) -> int:
        node_id = len(self.nodes) + 10
        if deps is None:
            deps = [self.nodes[-1].id] if self.nodes else []
        self.nodes.append(Node(id=node_id, name=name or f"n{node_id}", type=kind,
                               data_deps=deps,
                               attr=[make_attribute(k, v) for k, v in attrs.items()]))
        return node_id

    def coll(self, comm_type: int, size: int, group: str | None = None, **extra) -> int:
        attrs = {"comm_type": comm_type, "comm_size": size, **extra}
        if group is not None:
            attrs["pg_name"] = group
        return self.add(COLL, **attrs)


def write(folder: Path, ranks: list[Rank], groups: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, rank in enumerate(ranks):
        write_trace(folder / f"run.{r}.et", rank.nodes)
    if groups is not None:
        (folder / "comm_group.json").write_text(json.dumps(groups))
    return folder


def load(folder: Path, ranks: int | None = None, groups: bool = False):
    path = folder / "comm_group.json" if groups else None
    return load_trace(folder, path, ranks, "workload[0]")


def test_round_trip(tmp_path):
    """Every attribute type the producers use survives writer -> reader, plain and gzipped;
    the reader sees the metadata first and the nodes in order."""
    node = Node(id=7, name="ncclDevKernel_AllReduce", type=COLL, data_deps=[1, 2],
                ctrl_deps=[3], duration_micros=12,
                attr=[make_attribute("comm_type", ALL_REDUCE),
                      make_attribute("comm_size", 2**40, "uint64"),
                      make_attribute("comm_src", 3, "int32"),
                      make_attribute("pg_name", "5"), make_attribute("is_cpu_op", False),
                      make_attribute("ratio", 0.5)])
    meta = GlobalMetadata(version="0.0.4", attr=[make_attribute("schema", "1.1.0")])
    for compress in (False, True):
        path = tmp_path / f"t{int(compress)}.0.et"
        write_trace(path, [node, Node(id=8, type=COMP)], meta, compress=compress)
        got_meta, nodes = read_trace(path, "f")
        assert got_meta == meta and nodes == [node, Node(id=8, type=COMP)]
        assert attribute(nodes[0], "comm_size") == 2**40
        assert attribute(nodes[0], "comm_src") == 3 and attribute(nodes[0], "pg_name") == "5"
        assert attribute(nodes[0], "is_cpu_op") is False and attribute(nodes[0], "x") is None
    # the stream is varint length prefixes: a 200-byte message takes a 2-byte prefix
    big = Node(id=1, name="x" * 190)
    data = encode_stream([big])
    assert data[:2] == bytes([0x80 | (len(data) - 2) & 0x7F, (len(data) - 2) >> 7])


def four_ranks() -> list[Rank]:
    """Level 0: an all-reduce over all 4 ranks (no pg_name: the world) of 4,096 bytes.
    Level 1: rank 0 sends 1,000 bytes to rank 1 (tag 0) while group "a" = {2, 3} all-gathers
    2,048 bytes (label from pg_desc). Level 2: rank 1's all-to-all on group "b" = {0, 1} of
    512 bytes, after its receive (rank 0 joins after its send); ranks 2 and 3 idle."""
    ranks = [Rank() for _ in range(4)]
    for rank in ranks:
        rank.add(COMP, "forward")
        rank.coll(ALL_REDUCE, 4096)
    ranks[0].add(SEND, comm_size=1000, comm_dst=1)
    ranks[1].add(RECV, comm_size=1000, comm_src=0)
    for r in (2, 3):
        ranks[r].coll(ALL_GATHER, 2048, "a", pg_desc="dp")
    for r in (0, 1):
        ranks[r].add(COMP, "backward")
        ranks[r].coll(ALL_TO_ALL, 512, "b")
    return ranks


def test_phases_of_a_small_trace(tmp_path):
    trace = load(write(tmp_path / "t", four_ranks()), ranks=4)
    assert trace.ranks == 4 and len(trace.levels) == 3
    gpus = np.array([10, 11, 12, 13])
    step = chakra_step(trace, gpus, name="t", servers=FLAT)
    phases = [(p.name, p.repeat, p.flows.num_flows) for p in step.phases]
    # level 1: the p2p flow and the 2-rank ring's first step together, then the ring alone
    assert phases == [("level 0: all-reduce", 6, 4), ("level 1: dp+send-recv", 1, 3),
                      ("level 2: all-to-all", 1, 2)]
    ring = step.phases[0].flows
    assert list(ring.src) == [10, 11, 12, 13] and list(ring.dst) == [11, 12, 13, 10]
    assert np.all(ring.size == 1024)                       # 4,096 / 4 per ring step
    mixed = step.phases[1].flows
    assert sorted(zip(mixed.src, mixed.dst, mixed.size)) == [
        (10, 11, 1000.0), (12, 13, 1024.0), (13, 12, 1024.0)]   # all-gather: 2,048 / 2
    assert np.all(step.phases[2].flows.size == 256)        # all-to-all: 512 / 2 each way
    dims = {d.name: d for d in step.step.dimensions}
    assert dims["all-reduce"].bytes_per_gpu == 2 * 3 / 4 * 4096
    assert dims["dp+send-recv"].bytes_per_gpu == 1024       # rank 2 or 3 sends 1,024
    assert step.size == 6 * 1024 + 1000 + 256               # rank 0 sends the most
    groups = {step.step.group_names[g] for g in np.unique(mixed.group)}
    assert groups == {"world: rank 0 -> 1", "pg a"}


def test_concurrent_collectives_align_step_by_step(tmp_path):
    """Two all-reduces at the same level, over 2 and over 4 ranks: 2 steps of both, then 4
    of the larger alone."""
    ranks = [Rank() for _ in range(6)]
    for r in (0, 1):
        ranks[r].coll(ALL_REDUCE, 800, "x")
    for r in (2, 3, 4, 5):
        ranks[r].coll(ALL_REDUCE, 800, "y")
    step = chakra_step(load(write(tmp_path / "t", ranks)), np.arange(6), name="t",
                       servers=FLAT)
    assert [(p.repeat, p.flows.num_flows) for p in step.phases] == [(2, 6), (4, 4)]
    assert sorted(set(step.phases[0].flows.size)) == [200.0, 400.0]


def test_groups_from_the_comm_group_file(tmp_path):
    """comm_group.json names the members: a rank outside its group is refused."""
    ranks = [Rank() for _ in range(4)]
    for r in range(4):
        ranks[r].coll(ALL_REDUCE, 64, "0" if r < 2 else "1")
    folder = write(tmp_path / "t", ranks, {"0": [0, 1], "1": [2, 3]})
    assert len(load(folder, groups=True).instances) == 2
    (folder / "comm_group.json").write_text(json.dumps({"0": [0, 1], "1": [3]}))
    with pytest.raises(ScenarioError) as err:
        load(folder, groups=True)
    assert "run.2.et node 10" in str(err.value) and "members are [3]" in str(err.value)


def truncated(folder: Path) -> str:
    path = folder / "run.1.et"
    path.write_bytes(path.read_bytes()[:-3])
    return "run.1.et: truncated"


def unknown_type(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    for rank in ranks:
        rank.coll(42, 64)
    write(folder, ranks)
    return "run.0.et node 10 'n10': unknown collective type 42; allowed: 0 (ALL_REDUCE)"


def sizes_disagree(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    ranks[0].coll(ALL_REDUCE, 64, "g")
    ranks[1].coll(ALL_REDUCE, 128, "g")
    write(folder, ranks)
    return ("run.1.et node 10 'n10': all-reduce of 128 bytes on group 'g', but rank 0 "
            "(t/run.0.et node 10) runs all-reduce of 64 bytes there; ranks disagree")


def counts_disagree(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    ranks[0].coll(ALL_REDUCE, 64, "g")
    ranks[0].coll(ALL_REDUCE, 64, "g")
    ranks[1].coll(ALL_REDUCE, 64, "g")
    write(folder, ranks)
    return "run.0.et node 11 'n11': no matching collective on rank 1"


def unmatched_send(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    ranks[0].add(SEND, comm_size=8, comm_dst=1)
    ranks[1].add(COMP)
    write(folder, ranks)
    return "run.0.et node 10 'n10': no matching receive on rank 1"


def deadlock(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    ranks[0].coll(ALL_REDUCE, 64, "a")
    ranks[0].coll(ALL_REDUCE, 64, "b")
    ranks[1].coll(ALL_REDUCE, 64, "b")
    ranks[1].coll(ALL_REDUCE, 64, "a")
    write(folder, ranks)
    return "the traces deadlock"


def missing_dependency(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    ranks[0].add(COMP, deps=[99])
    write(folder, ranks)
    return "run.0.et node 10 'n10': depends on node 99, which is not in the file"


def missing_rank(folder: Path) -> str:
    write(folder, [Rank(), Rank(), Rank()])
    (folder / "run.1.et").unlink()
    return "run.1.et is missing"


def no_comm_size(folder: Path) -> str:
    ranks = [Rank(), Rank()]
    for rank in ranks:
        rank.add(COLL, comm_type=ALL_REDUCE)
    write(folder, ranks)
    return "run.0.et node 10 'n10': needs comm_size"


def garbage(folder: Path) -> str:
    write(folder, [Rank(), Rank()])
    (folder / "run.0.et").write_bytes(b"\x02\xff\xff")
    return "run.0.et: GlobalMetadata at byte 0 is not a valid protobuf message"


@pytest.mark.parametrize("make", [truncated, unknown_type, sizes_disagree, counts_disagree,
                                  unmatched_send, deadlock, missing_dependency, missing_rank,
                                  no_comm_size, garbage])
def test_bad_traces_get_one_clear_line(tmp_path, make):
    folder = tmp_path / "t"
    if make is truncated:
        write(folder, [Rank(), Rank()])
        for r in range(2):
            write_trace(folder / f"run.{r}.et", four_ranks()[r].nodes)
    expected = make(folder)
    with pytest.raises(ScenarioError) as err:
        load(folder)
    message = str(err.value)
    assert err.value.field.startswith("workload[0]")
    assert expected in message, message
    assert "\n" not in message


def test_rank_count_must_match_the_item(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load(write(tmp_path / "t", four_ranks()), ranks=8)
    assert err.value.field == "workload[0].gpus" and "allowed: gpus: 4" in err.value.message


def test_bundled_example(tmp_path, monkeypatch):
    """The bundled trace is what its generator writes, and becomes TP, PP and DP phases whose
    bytes per GPU are the generator's: DP all-reduces 256 MiB over 4 ranks (2 x 3/4 of it);
    each TP rank sends its 4 MiB share of 2 micro-batches' activations (stage 0) or gradients
    (stage 1) to the other stage."""
    script = runpy.run_path(str(REPO / "scenarios" / "traces" / "make_example.py"))
    monkeypatch.setitem(script["main"].__globals__, "FOLDER", tmp_path / "megatron-16")
    script["main"]()
    bundled = REPO / "scenarios" / "traces" / "megatron-16"
    for path in sorted(bundled.iterdir()):
        assert (tmp_path / "megatron-16" / path.name).read_bytes() == path.read_bytes()
    scenario = load_scenario(REPO / "scenarios" / "chakra-example.yaml")
    step = build_workload(scenario, np.random.default_rng(0))[0]
    assert step.kind == "chakra" and step.gpus == 16
    dims = {d.name: d.bytes_per_gpu for d in step.step.dimensions}
    assert dims["dp"] == 2 * 3 / 4 * 256 * 2**20
    assert dims["pp"] == 2 * 4 * 2**20
    assert set(dims) >= {"tp", "pp", "dp"}


def test_chakra_item_runs_through_the_cli(tmp_path):
    proc = fabricjax("analyze", REPO / "scenarios" / "chakra-example.yaml", "-p", "spray",
                     "-q", "--json", tmp_path / "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Training step: communication by parallel dimension" in proc.stdout
    steps = json.loads((tmp_path / "r.json").read_text())["steps"]
    assert steps[0]["workload"] == "megatron-16" and steps[0]["policy"] == "spray"
    assert {d["dimension"] for d in steps[0]["dimensions"]} >= {"tp", "pp", "dp"}
