"""A training step as users describe it (model shape, tp/pp/dp/ep, ZeRO stage) turned into
the step's communication: phases of concurrent collectives over every process group.

Contract: `parallel_grid` places the ranks (Megatron-LM's order by default: TP fastest, then
DP, then PP); `parameter_counts` and `training_bytes` are the closed-form formulas
(docs/training.md gives their sources); `training_step` builds the `Collective`: one phase per
kind of collective, each the union of all its groups' flows (every DP group's ring step at
once), tagged with its dimension, and a `StepPlan` naming every group. Host numpy only.

Formulas, per micro-batch of b sequences of s tokens, hidden size h, activation bytes a,
A = b s h a (Shoeybi et al. 2019, Megatron-LM; Narayanan et al. 2021, Efficient Large-Scale
Language Model Training on GPU Clusters): tensor parallelism all-reduces A twice in the
forward and twice in the backward of every layer (sequence parallelism's reduce-scatter +
all-gather moves the same bytes in the same ring steps; Korthikanti et al. 2022); pipeline
stages exchange A / tp per TP rank forward and backward (Megatron's scatter/gather of the
p2p tensor); an MoE layer runs 2 all-to-alls in the forward and 2 in the backward (dispatch
and combine; GShard, Lepikhin et al. 2020; DeepSpeed-MoE, Rajbhandari et al. 2022) of
b s k h a / tp bytes per GPU; data parallelism reduces the gradients once per step: an
all-reduce (2(n-1)/n of them sent per GPU), or with ZeRO (Rajbhandari et al. 2020) a
reduce-scatter plus an all-gather of the parameters (stage 1, the same volume), the
reduce-scatter after every micro-batch (stage 2), and all-gathers of the parameters in the
forward and backward of every micro-batch (stage 3: 3x the data-parallel volume per micro-
batch).
"""

from __future__ import annotations

import numpy as np

from fabricjax.config import ModelConfig, ParallelConfig, TrainingConfig
from fabricjax.core.units import format_bytes
from fabricjax.workload.collectives import (GroupSteps, Servers, group_all_to_all,
                                            group_ring)
from fabricjax.workload.flows import Collective, DimensionPlan, StepPlan

DIMENSIONS = ("tp", "pp", "ep", "dp")
# the backward pass costs about twice the forward's FLOPs (Kaplan et al. 2020; Narayanan et
# al. 2021 count 3 passes of matrix multiplications, 4 with recomputation)
BACKWARD_PASSES = 2


def data_parallel(par: ParallelConfig, gpus: int) -> int:
    """dp: given, or the item's GPUs / (tp x pp)."""
    return par.dp if par.dp is not None else gpus // (par.tp * par.pp)


def parallel_grid(gpus: np.ndarray, par: ParallelConfig) -> np.ndarray:
    """int[tp, dp, pp]: the GPU of every (TP rank, DP rank, PP stage). `par.order` names the
    dimensions fastest-varying first: with tp-dp-pp, rank r = t + tp (d + dp p), and rank r
    runs on gpus[r] (the item's GPUs in ascending id)."""
    gpus = np.asarray(gpus, dtype=np.int64)
    sizes = {"tp": par.tp, "dp": data_parallel(par, gpus.shape[0]), "pp": par.pp}
    names = par.order.split("-")
    ranks = np.arange(gpus.shape[0]).reshape([sizes[n] for n in reversed(names)])
    axes = [len(names) - 1 - names.index(n) for n in ("tp", "dp", "pp")]
    return gpus[ranks.transpose(axes)]


def parameter_counts(model: ModelConfig) -> tuple[float, float]:
    """(dense, expert) parameters of the whole model: per layer 4 h^2 of attention and an MLP
    of 2 h f (3 h f gated) with f = ffn_hidden (default 4 h), every `moe_every`-th layer's MLP
    replaced by `experts` of them when experts > 0 (biases, norms, routers and embeddings
    left out: 12 L h^2 for a dense model, Narayanan et al. 2021); `parameters` rescales both to
    that total."""
    h = float(model.hidden)
    ffn = float(model.ffn_hidden or 4 * model.hidden)
    mlp = (3.0 if model.gated_mlp else 2.0) * h * ffn
    moe_layers = model.layers // model.moe_every if model.experts else 0
    dense = model.layers * 4.0 * h * h + (model.layers - moe_layers) * mlp
    expert = moe_layers * model.experts * mlp
    if model.parameters is not None:
        scale = model.parameters / (dense + expert)
        dense, expert = dense * scale, expert * scale
    return dense, expert


def _passes(model: ModelConfig) -> int:
    """Passes over the layers per micro-batch: forward and backward, plus the recomputed
    forward."""
    return 3 if model.recompute else 2


def _sizes(model: ModelConfig, par: ParallelConfig, dp: int) -> dict:
    """The byte counts and repeats the formulas and the phases share."""
    m = model.micro_batches
    activation = float(model.micro_batch * model.sequence * model.hidden) * model.activation_bytes
    layers = model.layers // par.pp
    moe_layers = layers // model.moe_every if model.experts else 0
    dense, expert = parameter_counts(model)
    edp = dp // par.ep
    return {
        "m": m, "A": activation, "layers": layers, "moe_layers": moe_layers,
        # 2 TP all-reduces (attention and MLP) per layer and pass
        "tp_ops": m * layers * 2 * _passes(model),
        # 2 all-to-alls (dispatch and combine) per MoE layer and pass
        "ep_ops": m * moe_layers * 2 * _passes(model),
        "ep_buffer": activation * model.top_k / par.tp,
        "dense": dense / (par.tp * par.pp),            # parameters per GPU
        "expert": expert / (par.tp * par.pp * par.ep),
        "edp": edp,
    }


def _reduction(zero: int, m: int) -> tuple[int, int]:
    """(reduce-scatters of the gradients, all-gathers of the parameters) per step under ZeRO
    stage 1..3; stage 0 all-reduces once instead."""
    return {1: (1, 1), 2: (m, 1), 3: (m, 2 * m)}[zero]


def training_bytes(item: TrainingConfig, gpus: int) -> dict[str, float]:
    """{dimension: the most bytes one GPU sends in it over one step} (closed form; the
    phases `training_step` builds send exactly this, which tests/test_training.py checks).
    Dimensions without communication (size 1) are left out."""
    model, par = item.model, item.parallel
    dp = data_parallel(par, gpus)
    z = _sizes(model, par, dp)
    out = {}
    if par.tp > 1:
        out["tp"] = z["tp_ops"] * 2 * (par.tp - 1) / par.tp * z["A"]
    if par.pp > 1:   # middle stages send forward and backward; with 2 stages, one each
        out["pp"] = z["m"] * z["A"] / par.tp * (2 if par.pp > 2 else 1)
    if par.ep > 1 and z["ep_ops"]:
        out["ep"] = z["ep_ops"] * (par.ep - 1) / par.ep * z["ep_buffer"]
    g, w = model.gradient_bytes, model.parameter_bytes
    total = 0.0
    groups = [(dp, z["dense"] if par.ep > 1 else z["dense"] + z["expert"])]
    if par.ep > 1:
        groups.append((z["edp"], z["expert"]))
    for n, params in groups:
        if n < 2 or params == 0:
            continue
        if par.zero == 0:
            total += 2 * (n - 1) / n * params * g
        else:
            scatters, gathers = _reduction(par.zero, z["m"])
            total += (n - 1) / n * params * (scatters * g + gathers * w)
    if total:
        out["dp"] = total
    return out


def _dp_steps(groups: np.ndarray, params: float, model: ModelConfig, zero: int, label: str,
              first: int) -> list[GroupSteps]:
    """The gradient reduction of `params` parameters per GPU over data-parallel groups."""
    n = groups.shape[1]
    g, w = model.gradient_bytes, model.parameter_bytes
    if zero == 0:
        return [group_ring(groups, params * g, 2 * (n - 1), f"DP all-reduce{label}", "dp",
                           first)]
    scatters, gathers = _reduction(zero, model.micro_batches)
    return [group_ring(groups, params * g, scatters * (n - 1), f"DP reduce-scatter{label}",
                       "dp", first),
            group_ring(groups, params * w, gathers * (n - 1), f"DP all-gather{label}", "dp",
                       first)]


def training_step(item: TrainingConfig, gpus: np.ndarray, *, name: str,
                  servers: Servers) -> Collective:
    """One step of `item` on its GPUs (ascending id = rank order before `parallel.order`):
    a phase per kind of collective, each the union of all its process groups, in the order
    tp, pp, ep, dp (the scenario checks divisibility first)."""
    model, par = item.model, item.parallel
    grid = parallel_grid(gpus, par)                 # [tp, dp, pp]
    tp, dp, pp = grid.shape
    z = _sizes(model, par, dp)
    names: list[str] = []
    members: list[np.ndarray] = []
    steps: list[GroupSteps] = []
    described: dict[str, tuple[str, int, int]] = {}

    def add_groups(rows: np.ndarray, labels: list[str]) -> int:
        first = len(names)
        names.extend(labels)
        members.extend(rows)
        return first

    if tp > 1:
        rows = grid.transpose(1, 2, 0).reshape(-1, tp)          # (d, p) -> TP ranks
        first = add_groups(rows, [f"tp dp{d} pp{p}" for d in range(dp)
                                  for p in range(pp)])
        steps.append(group_ring(rows, z["A"], z["tp_ops"] * 2 * (tp - 1),
                                "TP all-reduce", "tp", first))
        described["tp"] = (f"{z['tp_ops']:,} all-reduces of {format_bytes(z['A'])}",
                           rows.shape[0], tp)
    if pp > 1:
        rows = grid.reshape(-1, pp)                             # (t, d) -> stages
        first = add_groups(rows, [f"pp tp{t} dp{d}" for t in range(tp)
                                  for d in range(dp)])
        count = rows.shape[0]
        group = np.repeat(np.arange(first, first + count), pp - 1)
        ahead, behind = rows[:, :-1].reshape(-1), rows[:, 1:].reshape(-1)
        chunk = z["A"] / tp
        steps.append(GroupSteps(np.concatenate([ahead, behind]),
                                np.concatenate([behind, ahead]),
                                np.full(2 * ahead.shape[0], chunk),
                                np.concatenate([group, group]), z["m"],
                                "PP send/recv", "pp"))
        described["pp"] = (f"{z['m']:,} x {format_bytes(chunk)} each way per stage boundary",
                           count, pp)
    if par.ep > 1 and z["ep_ops"]:
        ep = par.ep
        rows = grid.reshape(tp, dp // ep, ep, pp).transpose(0, 1, 3, 2).reshape(-1, ep)
        first = add_groups(rows, [f"ep tp{t} dp{q * ep}-{q * ep + ep - 1} pp{p}"
                                  for t in range(tp) for q in range(dp // ep)
                                  for p in range(pp)])
        steps.append(group_all_to_all(rows, z["ep_buffer"], z["ep_ops"], "EP all-to-all",
                                      "ep", first))
        described["ep"] = (f"{z['ep_ops']:,} all-to-alls of {format_bytes(z['ep_buffer'])}",
                           rows.shape[0], ep)
    if dp > 1:
        dense = z["dense"] if par.ep > 1 else z["dense"] + z["expert"]
        rows = grid.transpose(0, 2, 1).reshape(-1, dp)          # (t, p) -> DP ranks
        first = add_groups(rows, [f"dp tp{t} pp{p}" for t in range(tp)
                                  for p in range(pp)])
        dp_steps = _dp_steps(rows, dense, model, par.zero, "", first)
        count, size = rows.shape[0], dp
        edp = z["edp"]
        if par.ep > 1 and edp > 1 and z["expert"] > 0:
            ep = par.ep
            expert_rows = grid.reshape(tp, edp, ep, pp).transpose(0, 2, 3, 1).reshape(-1, edp)
            first = add_groups(expert_rows, [f"edp tp{t} ep{e} pp{p}"
                                             for t in range(tp) for e in range(ep)
                                             for p in range(pp)])
            dp_steps += _dp_steps(expert_rows, z["expert"], model, par.zero, " (experts)",
                                  first)
            count += expert_rows.shape[0]
        steps += [s for s in dp_steps if s.repeat > 0]
        kind = "all-reduce" if par.zero == 0 else f"ZeRO-{par.zero} reduce-scatter/all-gather"
        described["dp"] = (f"{kind} of {format_bytes(dense * model.gradient_bytes)} of "
                           "gradients per GPU" + (", experts' apart" if par.ep > 1 else ""),
                           count, size)
    num_gpus = int(np.max(gpus)) + 1
    sent = {d: np.zeros(num_gpus) for d in described}
    for s in steps:
        sent[s.dimension] += s.sent_per_gpu(num_gpus)
    expected = training_bytes(item, gpus.shape[0])
    dimensions = tuple(
        DimensionPlan(d, described[d][0], described[d][1], described[d][2],
                      expected.get(d, float(sent[d].max())))
        for d in DIMENSIONS if d in described)
    total_sent = sum(sent.values()) if sent else np.zeros(1)
    phases = tuple(s.phase(servers) for s in steps)
    return Collective(name, "training", int(gpus.shape[0]), float(np.max(total_sent)),
                      phases, busbw_factor=1.0, algorithm=_label(par, dp),
                      gpu_ids=gpus, step=StepPlan(
                          dimensions, tuple(names), tuple(members),
                          **_overlap(item, pp)))


def _label(par: ParallelConfig, dp: int) -> str:
    parts = [f"tp{par.tp}", f"pp{par.pp}", f"dp{dp}"]
    if par.ep > 1:
        parts.append(f"ep{par.ep}")
    if par.zero:
        parts.append(f"zero{par.zero}")
    return " ".join(parts)


def _overlap(item: TrainingConfig, pp: int) -> dict:
    """The compute of one step and how much data-parallel communication it hides: 1F1B
    pipelining runs m + pp - 1 micro-batch slots per step (the bubble, Narayanan et al. 2021);
    the gradient reduction overlaps the backward pass of the last micro-batch (of every
    micro-batch when ZeRO 2 or 3 reduces per micro-batch); everything else is exposed."""
    t = item.microbatch_compute_s
    model = item.model
    recompute = 1 if model.recompute else 0      # the recomputed forward runs in the backward
    backward = (BACKWARD_PASSES + recompute) / (BACKWARD_PASSES + 1 + recompute)
    per_microbatch = item.parallel.zero >= 2
    rule = (f"DP overlaps the backward pass ({backward:.2g} of a micro-batch's compute) of "
            + ("every micro-batch" if per_microbatch else "the last micro-batch")
            + "; TP, PP and EP are exposed; compute = (micro-batches + pp - 1) x per "
            "micro-batch (1F1B)")
    if t is None:
        return {"compute_s": None, "overlapped": ("dp",), "overlap_window_s": 0.0,
                "overlap_rule": rule}
    window = backward * t * (model.micro_batches if per_microbatch else 1)
    return {"compute_s": (model.micro_batches + pp - 1) * t, "overlapped": ("dp",),
            "overlap_window_s": window, "overlap_rule": rule}
