"""Chakra execution traces as a step of concurrent collectives (`collective: chakra`).

Contract: `load_trace(folder, ...)` reads one `<prefix>.<rank>.et` file per rank
(`workload.et`), takes each rank's communication nodes (collectives with their type, size and
process group; sends and receives with their peers) and the dependencies between them
(through any compute nodes), checks that the ranks agree, and returns a `Trace`;
`chakra_step` turns it into a `Collective` of phases in dependency order. Every problem is
one `ScenarioError` naming the field, the file and the node.

Semantics:
  * Process groups: `comm_groups` (ASTRA-sim's communicator-group JSON, {pg_name: [ranks]})
    when given, else the ranks whose traces use the group; a node without `pg_name` runs on
    every rank. A rank using a group it is not a member of, members issuing different numbers
    of collectives on a group, or the k-th collectives of a group differing in type or size
    between ranks: refused ("ranks that disagree on a group").
  * Sends and receives: the k-th send from rank a to rank b (same `comm_tag`) meets the k-th
    receive on b from a; an unmatched one, or sizes that differ, is refused.
  * Sizes (`comm_size`, bytes) mean what nccl-tests means: the all-reduce buffer, the
    gathered buffer of an all-gather and gather, each rank's input of a reduce-scatter and an
    all-to-all, the broadcast, reduced or scattered buffer.
  * Algorithms over a group of n ranks (in rank order; root = its first rank): all-reduce a
    ring, 2(n-1) steps of size/n; all-gather and reduce-scatter a ring, n-1 steps of size/n;
    all-to-all one step of n(n-1) flows of size/n; broadcast and reduce a pipelined chain (n-1
    flows of size at once); gather and scatter n-1 flows of size/n to or from the root;
    barrier no bytes.
  * Phases: a communication instance's level is 1 + the highest level among the instances
    any of its nodes depends on (0 without any); the instances of one level run at once, step
    by step (step k of every instance together; an instance that has finished drops out), and
    the levels run one after another. A dependency cycle across ranks (a deadlock) is refused.
  * Dimensions: each phase is labelled with its instances' `pg_desc` (when the producer set
    one) or else their collective's name; the step report splits time by these labels.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.workload.collectives import GroupSteps, Servers
from fabricjax.workload.et import (COLLECTIVE_TYPES, COMM_COLL_NODE, COMM_RECV_NODE,
                                   COMM_SEND_NODE, attribute, integer_attribute, read_trace)
from fabricjax.workload.flows import Collective, DimensionPlan, StepPlan

TRACE_NAME = re.compile(r"^(?P<prefix>.+)\.(?P<rank>[0-9]+)\.et$")
MAX_RANKS = 1 << 20
COLLECTIVE_NAMES = {0: "all-reduce", 1: "reduce", 2: "all-gather", 3: "gather", 4: "scatter",
                    5: "broadcast", 6: "all-to-all", 7: "reduce-scatter", 8: "reduce-scatter",
                    9: "barrier"}
WORLD = ""    # the group of a collective without pg_name: every rank


@dataclasses.dataclass(frozen=True)
class CommOp:
    """One communication node of one rank. kind: a COLLECTIVE_NAMES value, "send" or "recv";
    peer: the other rank of a send or receive (-1 else); label: pg_desc, else the kind."""

    rank: int
    node: int
    name: str
    kind: str
    size: float
    group: str
    peer: int
    tag: int
    label: str


@dataclasses.dataclass(frozen=True)
class Instance:
    """One collective on a group (`ranks` in rank order) or one send/receive pair (ranks =
    [sender, receiver]), with its member nodes ((rank, node id) pairs)."""

    kind: str
    size: float
    group: str
    ranks: tuple[int, ...]
    label: str
    nodes: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class Trace:
    """A folder of per-rank traces, checked: `levels[i]` are the indices of the instances
    that run at once at dependency level i; `files[r]` is rank r's file name."""

    folder: str
    files: tuple[str, ...]
    instances: tuple[Instance, ...]
    levels: tuple[tuple[int, ...], ...]

    @property
    def ranks(self) -> int:
        return len(self.files)


# --------------------------------------------------------------------------- reading

def trace_files(folder: Path, field: str) -> list[Path]:
    """The per-rank files of a folder, in rank order: exactly one `<prefix>.<rank>.et` per
    rank 0..R-1, one prefix."""
    if not folder.is_dir():
        raise ScenarioError(field, f"{short_repr(str(folder))} is not a folder; allowed: a "
                            "folder of <prefix>.<rank>.et files")
    found: dict[str, dict[int, Path]] = collections.defaultdict(dict)
    for path in sorted(folder.iterdir()):
        match = TRACE_NAME.match(path.name)
        if match and path.is_file():
            found[match["prefix"]][int(match["rank"])] = path
    if not found:
        raise ScenarioError(field, f"{folder.name}/ holds no <prefix>.<rank>.et file")
    if len(found) > 1:
        raise ScenarioError(field, f"{folder.name}/ holds traces of several prefixes "
                            f"({', '.join(sorted(found)[:4])}); allowed: one run per folder")
    prefix, ranks = next(iter(found.items()))
    count = max(ranks) + 1
    if count > MAX_RANKS:
        raise ScenarioError(field, f"rank {count - 1} is beyond the {MAX_RANKS:,} ranks "
                            "fabricjax reads")
    missing = [r for r in range(count) if r not in ranks]
    if missing:
        raise ScenarioError(field, f"{prefix}.{missing[0]}.et is missing: the folder has "
                            f"ranks up to {count - 1}, and every rank needs its file")
    return [ranks[r] for r in range(count)]


def _comm_op(rank: int, node, where: str, ranks: int, field: str) -> CommOp | None:
    """The communication node `node` of `rank` as a CommOp (None for any other node)."""
    if node.type not in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
        return None
    what = f"{where} node {node.id} {short_repr(node.name, 40)}"
    try:
        size = integer_attribute(node, "comm_size")
        tag = integer_attribute(node, "comm_tag") or 0
        if node.type == COMM_COLL_NODE:
            comm_type = integer_attribute(node, "comm_type")
            peer = -1
        else:
            peer = integer_attribute(node, "comm_dst" if node.type == COMM_SEND_NODE
                                     else "comm_src")
    except ValueError as err:
        raise ScenarioError(field, f"{what}: {err}") from None
    if size is None or size < 0:
        raise ScenarioError(field, f"{what}: needs comm_size (bytes >= 0)")
    if node.type == COMM_COLL_NODE:
        if comm_type is None:
            raise ScenarioError(field, f"{what}: a COMM_COLL_NODE without comm_type")
        if comm_type not in COLLECTIVE_NAMES:
            allowed = ", ".join(f"{k} ({v})" for k, v in COLLECTIVE_TYPES.items())
            raise ScenarioError(field, f"{what}: unknown collective type {comm_type}; "
                                f"allowed: {allowed}")
        kind = COLLECTIVE_NAMES[comm_type]
    else:
        kind = "send" if node.type == COMM_SEND_NODE else "recv"
        key = "comm_dst" if kind == "send" else "comm_src"
        if peer is None or not 0 <= peer < ranks or peer == rank:
            raise ScenarioError(field, f"{what}: {key} {peer} is not another rank; allowed: "
                                f"0..{ranks - 1} but {rank}")
    group = attribute(node, "pg_name")
    desc = attribute(node, "pg_desc")
    label = str(desc) if desc not in (None, "", "undefined") else (
        "send-recv" if kind in ("send", "recv") else kind)
    return CommOp(rank, int(node.id), node.name, kind, float(size),
                  WORLD if group is None else str(group), peer, int(tag), label)


def _rank_graph(rank: int, nodes, where: str, ranks: int, field: str):
    """(comm ops in file order, {node id: comm instance predecessors' node ids}) of one rank:
    for every communication node, the nearest communication nodes it depends on through any
    chain of other nodes (data and control dependencies alike)."""
    by_id = {}
    for node in nodes:
        if node.id in by_id:
            raise ScenarioError(field, f"{where} node {node.id}: the id appears twice")
        by_id[node.id] = node
    deps = {}
    for node in nodes:
        wanted = list(dict.fromkeys([*node.data_deps, *node.ctrl_deps]))
        for dep in wanted:
            if dep not in by_id:
                raise ScenarioError(field, f"{where} node {node.id} "
                                    f"{short_repr(node.name, 40)}: depends on node {dep}, "
                                    "which is not in the file")
        deps[node.id] = wanted
    ops = {}
    for node in nodes:
        op = _comm_op(rank, node, where, ranks, field)
        if op is not None:
            ops[node.id] = op
    # topological order (Kahn) over this rank's nodes
    pending = {n: len(d) for n, d in deps.items()}
    users = collections.defaultdict(list)
    for n, d in deps.items():
        for dep in d:
            users[dep].append(n)
    ready = collections.deque(n.id for n in nodes if pending[n.id] == 0)
    order = []
    while ready:
        n = ready.popleft()
        order.append(n)
        for user in users[n]:
            pending[user] -= 1
            if pending[user] == 0:
                ready.append(user)
    if len(order) < len(nodes):
        stuck = next(n for n in nodes if pending[n.id] > 0)
        raise ScenarioError(field, f"{where} node {stuck.id} {short_repr(stuck.name, 40)}: "
                            "its dependencies form a cycle")
    reach: dict[int, frozenset] = {}
    preds: dict[int, frozenset] = {}
    for n in order:
        nearest = set()
        for dep in deps[n]:
            if dep in ops:
                nearest.add(dep)
            else:
                nearest |= reach[dep]
        nearest_f = frozenset(nearest)
        if n in ops:
            preds[n] = nearest_f
            reach[n] = frozenset((n,))
        else:
            reach[n] = nearest_f
    return [ops[n.id] for n in nodes if n.id in ops], preds


def _groups_file(path: Path, ranks: int, field: str) -> dict[str, tuple[int, ...]]:
    """ASTRA-sim's communicator groups: {pg_name: [ranks]}."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ScenarioError(field, f"{path.name}: not readable JSON ({err})") from None
    if not isinstance(data, dict):
        raise ScenarioError(field, f"{path.name}: expected an object {{pg_name: [ranks]}}")
    out = {}
    for name, members in data.items():
        if (not isinstance(members, list) or not members or any(
                not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < ranks
                for r in members) or len(set(members)) != len(members)):
            raise ScenarioError(field, f"{path.name}: group {short_repr(name, 30)}: "
                                f"expected distinct ranks 0..{ranks - 1}")
        out[str(name)] = tuple(members)
    return out


def load_trace(folder: Path, comm_groups: Path | None, ranks: int | None,
               field: str) -> Trace:
    """Read and check every rank's trace (see the module docstring). `ranks`: the GPUs the
    item has (None: any)."""
    files = trace_files(folder, f"{field}.folder")
    if ranks is not None and len(files) != ranks:
        raise ScenarioError(f"{field}.gpus", f"the trace in {folder.name}/ has {len(files)} "
                            f"ranks but the item has {ranks} GPUs; allowed: gpus: "
                            f"{len(files)}")
    count = len(files)
    where = f"{field}.folder"
    per_rank, preds = [], {}
    for rank, path in enumerate(files):
        _, nodes = read_trace(path, where, f"{folder.name}/{path.name}")
        ops, rank_preds = _rank_graph(rank, nodes, f"{folder.name}/{path.name}", count, where)
        per_rank.append(ops)
        preds.update({(rank, n): p for n, p in rank_preds.items()})
    names = [f"{folder.name}/{p.name}" for p in files]
    groups = None
    if comm_groups is not None:
        groups = _groups_file(comm_groups, count, f"{field}.comm_groups")
    instances, member_of = _match(per_rank, groups, names, count, where)
    levels = _levels(instances, member_of, preds, names, where)
    return Trace(folder.name, tuple(names), tuple(instances), levels)


def _match(per_rank: list[list[CommOp]], groups: dict | None, names: list[str], count: int,
           field: str):
    """Instances from the ranks' ops, and {(rank, node id): instance index}."""
    def at(op: CommOp) -> str:
        return f"{names[op.rank]} node {op.node} {short_repr(op.name, 40)}"

    by_group: dict[str, dict[int, list[CommOp]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    sends: dict[tuple, list[CommOp]] = collections.defaultdict(list)
    recvs: dict[tuple, list[CommOp]] = collections.defaultdict(list)
    for ops in per_rank:
        for op in ops:
            if op.kind == "send":
                sends[(op.rank, op.peer, op.tag)].append(op)
            elif op.kind == "recv":
                recvs[(op.peer, op.rank, op.tag)].append(op)
            else:
                by_group[op.group][op.rank].append(op)
    instances: list[Instance] = []
    member_of: dict[tuple[int, int], int] = {}
    for group in sorted(by_group):
        issued = by_group[group]
        if group == WORLD:
            members = tuple(range(count))
        elif groups is not None:
            if group not in groups:
                op = next(iter(issued.values()))[0]
                raise ScenarioError(field, f"{at(op)}: group {short_repr(group, 30)} is not "
                                    "in the communicator groups")
            members = groups[group]
        else:
            members = tuple(sorted(issued))
        outsiders = [r for r in issued if r not in members]
        if outsiders:
            op = issued[outsiders[0]][0]
            raise ScenarioError(field, f"{at(op)}: rank {op.rank} runs a collective on group "
                                f"{short_repr(group, 30)}, whose members are "
                                f"{short_repr(list(members), 40)}")
        counts = {r: len(issued.get(r, [])) for r in members}
        most = max(counts, key=counts.get)
        for r in members:
            if counts[r] != counts[most]:
                op = issued[most][counts[r]]
                raise ScenarioError(field, f"{at(op)}: no matching collective on rank {r} "
                                    f"({names[r]} issues {counts[r]} on group "
                                    f"{short_repr(group, 30)}, rank {most} issues "
                                    f"{counts[most]}); ranks disagree on the group")
        for k in range(counts[most]):
            first = issued[members[0]][k]
            for r in members[1:]:
                op = issued[r][k]
                if (op.kind, op.size) != (first.kind, first.size):
                    raise ScenarioError(field, f"{at(op)}: {op.kind} of {op.size:,.0f} bytes "
                                        f"on group {short_repr(group, 30)}, but rank "
                                        f"{first.rank} ({names[first.rank]} node {first.node}) "
                                        f"runs {first.kind} of {first.size:,.0f} bytes there; "
                                        "ranks disagree on the group")
            nodes = tuple((r, issued[r][k].node) for r in members)
            for key in nodes:
                member_of[key] = len(instances)
            instances.append(Instance(first.kind, first.size, group, members, first.label,
                                      nodes))
    for key in sorted(set(sends) | set(recvs)):
        out, into = sends.get(key, []), recvs.get(key, [])
        if len(out) != len(into):
            extra = (out if len(out) > len(into) else into)[min(len(out), len(into))]
            other = "receive" if extra.kind == "send" else "send"
            raise ScenarioError(field, f"{at(extra)}: no matching {other} on rank "
                                f"{extra.peer} (tag {extra.tag})")
        for a, b in zip(out, into):
            if a.size != b.size:
                raise ScenarioError(field, f"{at(b)}: receives {b.size:,.0f} bytes but "
                                    f"{names[a.rank]} node {a.node} sends {a.size:,.0f}")
            member_of[(a.rank, a.node)] = member_of[(b.rank, b.node)] = len(instances)
            instances.append(Instance("send-recv", a.size, a.group, (a.rank, b.rank), a.label,
                                      ((a.rank, a.node), (b.rank, b.node))))
    return instances, member_of


def _levels(instances: list[Instance], member_of: dict, preds: dict, names: list[str],
            field: str) -> tuple[tuple[int, ...], ...]:
    """Instances by dependency level (Kahn's order over the instance graph)."""
    before = [set() for _ in instances]
    for (rank, node), deps in preds.items():
        here = member_of[(rank, node)]
        for dep in deps:
            there = member_of[(rank, dep)]
            if there != here:
                before[here].add(there)
    after = collections.defaultdict(list)
    for i, deps in enumerate(before):
        for d in deps:
            after[d].append(i)
    waiting = [len(d) for d in before]
    level = [0] * len(instances)
    ready = collections.deque(i for i, w in enumerate(waiting) if w == 0)
    done = 0
    while ready:
        i = ready.popleft()
        done += 1
        for j in after[i]:
            level[j] = max(level[j], level[i] + 1)
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if done < len(instances):
        stuck = next(i for i, w in enumerate(waiting) if w > 0)
        rank, node = instances[stuck].nodes[0]
        raise ScenarioError(field, f"{names[rank]} node {node}: its "
                            f"{instances[stuck].kind} waits, through the ranks' dependencies, "
                            "for communication that waits for it; the traces deadlock")
    out = collections.defaultdict(list)
    for i, lv in enumerate(level):
        out[lv].append(i)
    return tuple(tuple(out[lv]) for lv in sorted(out))


# --------------------------------------------------------------------------- phases

def instance_steps(inst: Instance) -> list[tuple[np.ndarray, np.ndarray, float, int]]:
    """(src ranks, dst ranks, bytes per flow, repeat) blocks of one instance, in order."""
    ranks = np.asarray(inst.ranks, dtype=np.int64)
    n, size = ranks.shape[0], inst.size
    if inst.kind == "send-recv":
        return [(ranks[:1], ranks[1:], size, 1)] if size > 0 else []
    if n < 2 or size <= 0 or inst.kind == "barrier":
        return []
    ring = (ranks, np.roll(ranks, -1))
    if inst.kind == "all-reduce":
        return [(*ring, size / n, 2 * (n - 1))]
    if inst.kind in ("all-gather", "reduce-scatter"):
        return [(*ring, size / n, n - 1)]
    if inst.kind == "all-to-all":
        i = np.repeat(np.arange(n), n - 1)
        j = (i + np.tile(np.arange(1, n), n)) % n
        return [(ranks[i], ranks[j], size / n, 1)]
    if inst.kind == "broadcast":        # pipelined chain from the root
        return [(ranks[:-1], ranks[1:], size, 1)]
    if inst.kind == "reduce":           # pipelined chain into the root
        return [(ranks[1:], ranks[:-1], size, 1)]
    if inst.kind == "gather":
        return [(ranks[1:], np.full(n - 1, ranks[0]), size / n, 1)]
    return [(np.full(n - 1, ranks[0]), ranks[1:], size / n, 1)]       # scatter


def _overlay(blocks: list[list[tuple]], labels: list[str], group_ids: list[int],
             gpus: np.ndarray, level: int) -> list[GroupSteps]:
    """Step k of every instance of a level together: the segments between the instances'
    step boundaries, each one step of the union of the blocks active in it."""
    spans = []   # (start, end, block, instance)
    for inst, parts in enumerate(blocks):
        at = 0
        for part in parts:
            spans.append((at, at + part[3], part, inst))
            at += part[3]
    bounds = sorted({0, *(s[0] for s in spans), *(s[1] for s in spans)})
    out = []
    for start, end in zip(bounds, bounds[1:]):
        active = [(part, inst) for s, e, part, inst in spans if s <= start and end <= e]
        if not active:
            continue
        src = np.concatenate([gpus[p[0]] for p, _ in active])
        dst = np.concatenate([gpus[p[1]] for p, _ in active])
        size = np.concatenate([np.full(p[0].shape[0], float(p[2])) for p, _ in active])
        group = np.concatenate([np.full(p[0].shape[0], group_ids[i], np.int64)
                                for p, i in active])
        label = "+".join(sorted({labels[i] for _, i in active}))
        out.append(GroupSteps(src, dst, size, group, end - start,
                              f"level {level}: {label}", label))
    return out


def trace_steps(trace: Trace, gpus: np.ndarray):
    """(GroupSteps of every phase in order, group names, group GPUs): the trace's phases on
    `gpus` (trace rank r on gpus[r])."""
    gpus = np.asarray(gpus, dtype=np.int64)
    keys: dict[tuple, int] = {}
    names: list[str] = []
    members: list[np.ndarray] = []

    def group_id(inst: Instance) -> int:
        pair = inst.kind == "send-recv"
        key = ("p2p", inst.group, *inst.ranks) if pair else ("group", inst.group)
        if key not in keys:
            keys[key] = len(names)
            where = "world" if inst.group == WORLD else f"pg {inst.group}"
            names.append(f"{where}: rank {inst.ranks[0]} -> {inst.ranks[1]}" if pair
                         else where)
            members.append(gpus[np.asarray(inst.ranks, dtype=np.int64)])
        return keys[key]

    steps = []
    for level, indices in enumerate(trace.levels):
        chosen = [trace.instances[i] for i in indices]
        blocks = [instance_steps(inst) for inst in chosen]
        ids = [group_id(inst) for inst in chosen]
        steps += _overlay(blocks, [inst.label for inst in chosen], ids, gpus, level)
    return steps, tuple(names), tuple(members)


def max_phase_flows(trace: Trace) -> int:
    """The most flows of one phase of the trace (for the memory estimate)."""
    steps, _, _ = trace_steps(trace, np.arange(trace.ranks))
    return max((s.num_flows for s in steps), default=0)


def chakra_step(trace: Trace, gpus: np.ndarray, *, name: str, servers: Servers) -> Collective:
    """The trace as a Collective: its phases in dependency order, tagged with their labels,
    and a StepPlan (no compute: the trace's compute nodes are not modelled)."""
    gpus = np.asarray(gpus, dtype=np.int64)
    steps, names, members = trace_steps(trace, gpus)
    num_gpus = int(gpus.max()) + 1
    sent: dict[str, np.ndarray] = {}
    groups: dict[str, set] = collections.defaultdict(set)
    for s in steps:
        sent[s.dimension] = sent.get(s.dimension, np.zeros(num_gpus)) + s.sent_per_gpu(num_gpus)
        groups[s.dimension] |= set(np.unique(s.group).tolist())
    dimensions = tuple(
        DimensionPlan(d, f"{len(groups[d]):,} group(s) in the trace", len(groups[d]),
                      max(members[g].shape[0] for g in groups[d]), float(sent[d].max()))
        for d in dict.fromkeys(s.dimension for s in steps))
    total = sum(sent.values()) if sent else np.zeros(1)
    return Collective(name, "chakra", int(gpus.shape[0]), float(np.max(total)),
                      tuple(s.phase(servers) for s in steps), busbw_factor=1.0,
                      algorithm=trace.folder, gpu_ids=gpus,
                      step=StepPlan(dimensions, names, members))
