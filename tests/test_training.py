"""Training steps: byte counts per dimension against hand calculations, the rank layout
(Megatron-LM's order), the phases built from the plan, the scenario checks, the memory
model's flow counts, and one analysis end to end (step record, overlap rule, JSON, CLI).

Hand calculations use A = micro_batch x sequence x hidden x activation_bytes, the bytes of
one micro-batch's activation (README, "Training steps")."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fabricjax.config import TrainingConfig
from fabricjax.core.errors import ScenarioError
from fabricjax.engine.plan import estimate_memory, phase_candidates, phase_flows
from fabricjax.scenario import parse_scenario
from fabricjax.workload.build import build_workload
from fabricjax.workload.collectives import Servers
from fabricjax.workload.training import (parallel_grid, parameter_counts, training_bytes,
                                         training_step)
from test_cli import fabricjax

FLAT = Servers(1 << 30, 8, 0.0)   # no scale-up domain: every flow stays in the phases


def item(model: dict, parallel: dict, **extra) -> TrainingConfig:
    return TrainingConfig.model_validate({"collective": "training", "model": model,
                                          "parallel": parallel, **extra})


def sent_by_dimension(collective, num_gpus: int) -> dict[str, np.ndarray]:
    """Bytes each GPU sends per dimension, summed over the phases' flows x repeats."""
    out: dict[str, np.ndarray] = {}
    for phase in collective.phases:
        flows = phase.flows
        sent = np.bincount(flows.src, weights=flows.size, minlength=num_gpus) * phase.repeat
        out[phase.dimension] = out.get(phase.dimension, 0) + sent
    return out


DENSE = {"layers": 4, "hidden": 64, "sequence": 16, "micro_batch": 2, "micro_batches": 3}


def test_dense_bytes_match_the_hand_calculation():
    """tp 2, pp 2, dp 4 on 16 GPUs, ZeRO 0. A = 2 x 16 x 64 x 2 = 4,096 bytes; 2 layers per
    stage. TP: 4 all-reduces per layer and micro-batch = 24, each sending 2(2-1)/2 A = 4,096:
    98,304. PP (2 stages): each GPU sends one way, 3 micro-batches x A / tp = 6,144. DP:
    12 x 4 x 64^2 = 196,608 parameters, 49,152 per GPU = 98,304 gradient bytes, all-reduced
    over 4: 2 x 3/4 x 98,304 = 147,456."""
    cfg = item(DENSE, {"tp": 2, "pp": 2})
    assert parameter_counts(cfg.model) == (196_608.0, 0.0)
    expected = {"tp": 98_304.0, "pp": 6_144.0, "dp": 147_456.0}
    assert training_bytes(cfg, 16) == expected
    step = training_step(cfg, np.arange(16), name="t", servers=FLAT)
    sent = sent_by_dimension(step, 16)
    for dim, value in expected.items():
        assert sent[dim].max() == pytest.approx(value, rel=1e-12), dim
    assert [d.bytes_per_gpu for d in step.step.dimensions] == list(expected.values())
    # the TP ring: 24 all-reduces x 2(tp - 1) steps of A / tp per GPU
    tp = step.phases[0]
    assert (tp.dimension, tp.repeat, tp.flows.num_flows) == ("tp", 48, 16)
    assert np.all(tp.flows.size == 2_048)


def test_three_stages_send_both_ways_and_recompute_adds_a_forward():
    """pp 4: middle stages send forward and backward, 2 x m x A / tp; recomputation makes TP
    6 all-reduces per layer and micro-batch."""
    cfg = item({**DENSE, "recompute": True}, {"tp": 2, "pp": 4}, microbatch_compute_s=0.01)
    got = training_bytes(cfg, 16)
    plan = training_step(cfg, np.arange(16), name="t", servers=FLAT).step
    assert plan.compute_s == pytest.approx((3 + 4 - 1) * 0.01)
    assert plan.overlap_window_s == pytest.approx(0.75 * 0.01)   # backward + recompute: 3 of 4
    activation = 2 * 16 * 64 * 2
    assert got["pp"] == 2 * 3 * activation / 2
    assert got["tp"] == 3 * 1 * 6 * activation       # 3 micro-batches x 1 layer x 6 x A
    sent = sent_by_dimension(training_step(cfg, np.arange(16), name="t", servers=FLAT), 16)
    assert sent["pp"].max() == got["pp"]
    assert sent["pp"].min() == got["pp"] / 2        # first and last stages: one way
    assert "dp" in sent and sent["dp"].max() == pytest.approx(got["dp"], rel=1e-12)


def test_moe_bytes_match_the_hand_calculation():
    """8 GPUs, tp 1, pp 1, dp 8, ep 2, 4 experts top-2, 2 layers of hidden 32 (FFN 128),
    sequence 8, 2 micro-batches, ZeRO 1. A = 8 x 32 x 2 = 512. EP: 4 all-to-alls per MoE layer
    and micro-batch = 16, each of T = A x top_k = 1,024 bytes per GPU, half of it leaving:
    8,192. Parameters: dense (attention) 2 x 4 x 32^2 = 8,192; experts 2 x 4 x 2 x 32 x 128
    = 65,536, 32,768 per EP rank. DP (ZeRO 1: reduce-scatter of 2-byte gradients plus
    all-gather of 2-byte parameters): dense over 8 ranks 7/8 x 8,192 x 4 = 28,672, experts
    over the 4 expert-data-parallel replicas 3/4 x 32,768 x 4 = 98,304."""
    cfg = item({"layers": 2, "hidden": 32, "sequence": 8, "micro_batches": 2, "experts": 4,
                "top_k": 2}, {"ep": 2, "zero": 1})
    assert parameter_counts(cfg.model) == (8_192.0, 65_536.0)
    expected = {"ep": 8_192.0, "dp": 28_672.0 + 98_304.0}
    assert training_bytes(cfg, 8) == expected
    step = training_step(cfg, np.arange(8), name="m", servers=FLAT)
    sent = sent_by_dimension(step, 8)
    for dim, value in expected.items():
        assert sent[dim].max() == pytest.approx(value, rel=1e-12), dim
    names = step.step.group_names
    members = {n: list(g) for n, g in zip(names, step.step.group_gpus)}
    # EP over consecutive DP ranks; expert DP over every ep-th one (Megatron's tp-cp-ep-dp-pp)
    assert members["ep tp0 dp0-1 pp0"] == [0, 1]
    assert members["edp tp0 ep1 pp0"] == [1, 3, 5, 7]
    assert members["dp tp0 pp0"] == list(range(8))


@pytest.mark.parametrize("zero, factor", [(0, 2.0), (1, 2.0), (2, 3 + 1), (3, 3 * 3)])
def test_zero_stages(zero, factor):
    """Per GPU over dp 4 with 2-byte gradients and parameters (P bytes per GPU), m = 3:
    stage 0 and 1 send 2 x 3/4 P; stage 2 reduce-scatters every micro-batch (3 + 1 gathers:
    4 x 3/4 P); stage 3 also gathers the parameters twice per micro-batch (9 x 3/4 P)."""
    cfg = item(DENSE, {"tp": 2, "pp": 2, "zero": zero})
    per_gpu = 196_608 / 4 * 2
    expected = (2 * 3 / 4 if zero == 0 else 3 / 4 * factor) * per_gpu
    assert training_bytes(cfg, 16)["dp"] == pytest.approx(expected)
    sent = sent_by_dimension(training_step(cfg, np.arange(16), name="z", servers=FLAT), 16)
    assert sent["dp"].max() == pytest.approx(expected, rel=1e-12)


def test_rank_order():
    """Megatron-LM's default (tp-dp-pp): TP neighbours, DP at stride tp, PP at stride tp x dp;
    tp-pp-dp swaps the last two."""
    gpus = np.arange(8) + 100
    grid = parallel_grid(gpus, item(DENSE, {"tp": 2, "pp": 2}).parallel)
    assert grid.shape == (2, 2, 2)
    assert list(grid[:, 0, 0]) == [100, 101]       # a TP group
    assert list(grid[0, :, 0]) == [100, 102]       # a DP group
    assert list(grid[0, 0, :]) == [100, 104]       # a pipeline
    other = parallel_grid(gpus, item(DENSE, {"tp": 2, "pp": 2, "order": "tp-pp-dp"}).parallel)
    assert list(other[0, 0, :]) == [100, 102] and list(other[0, :, 0]) == [100, 104]


def test_tensor_parallel_rides_the_scale_up_domain():
    """TP groups inside 8-GPU servers leave the fabric when there is a scale-up domain; the
    phase's time comes from the scale-up rate."""
    cfg = item(DENSE, {"tp": 8, "pp": 1})
    step = training_step(cfg, np.arange(16), name="t", servers=Servers(32, 8, 3600.0))
    tp = step.phases[0]
    assert tp.dimension == "tp" and tp.flows.num_flows == 0 and tp.scaleup_flows == 16
    assert tp.scaleup_time == pytest.approx(4096 / 8 * 8e-9 / 3600.0)


@pytest.mark.parametrize("parallel, model, field", [
    ({"tp": 3}, {}, "workload[0].parallel"),
    ({"tp": 2, "dp": 4}, {}, "workload[0].parallel.dp"),
    ({"pp": 3, "tp": 1}, {"layers": 4}, "workload[0].parallel"),
    ({"pp": 8, "tp": 2}, {"layers": 4}, "workload[0].model.layers"),
    ({"ep": 2}, {}, "workload[0].parallel.ep"),
    ({"ep": 3, "tp": 1}, {"experts": 3}, "workload[0].parallel.ep"),
    ({"ep": 4, "tp": 1}, {"experts": 6}, "workload[0].model.experts"),
    ({}, {"experts": 4, "top_k": 5}, "workload[0].model.top_k"),
    ({"pp": 2}, {"experts": 4, "moe_every": 4}, "workload[0].model.moe_every"),
])
def test_bad_plans_name_the_field(parallel, model, field):
    data = {"fabric": {"gpus": 16, "planes": 2, "radix": 8},
            "workload": [{"collective": "training", "model": {**DENSE, **model},
                          "parallel": parallel}]}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert err.value.field == field
    assert "allowed" in err.value.message


def test_memory_model_counts_every_kind_of_phase():
    """phase_flows is the largest phase actually built; the estimate sees the all-to-alls."""
    data = {"fabric": {"gpus": 64, "planes": 2, "radix": 16},
            "workload": [{"collective": "training",
                          "model": {**DENSE, "experts": 8, "layers": 4},
                          "parallel": {"tp": 2, "pp": 2, "ep": 4}}]}
    scenario = parse_scenario(data)
    built = build_workload(scenario, np.random.default_rng(0))[0]
    flat = parse_scenario({**data, "fabric": {**data["fabric"], "gpus_per_server": 1}})
    largest = max(p.flows.num_flows for p in
                  build_workload(flat, np.random.default_rng(0))[0].phases)
    assert phase_flows(scenario.workload[0], 64) == largest == 64 * 3
    assert {flows for flows, _, _ in phase_candidates(scenario)} == {64, 64 * 2 * 1 // 2, 192}
    assert estimate_memory(scenario).flows == 192
    assert built.kind == "training" and built.step is not None


TINY = """
name: tiny-training
seed: 2
fabric: {gpus: 64, planes: 2, radix: 16, gpus_per_server: 4, scaleup_gbps: 3600}
policies: [ecmp]
solver: {progressive: false}
workload:
  - name: moe
    collective: training
    model: {layers: 4, hidden: 512, sequence: 256, micro_batches: 4, experts: 8}
    parallel: {tp: 2, pp: 2, ep: 4}
    microbatch_compute_s: 0.001
"""


def test_step_record_end_to_end(tmp_path):
    """The CLI prints the step tables and the JSON carries them: dimension times add up to
    the record's completion, busbw is bytes per GPU / time, the slowest group is one whose
    flows cross the worst link at the phase's slowest rate, and the overlap rule hides at
    most the window (2/3 of a micro-batch's compute) of the DP time."""
    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    out = tmp_path / "r.json"
    proc = fabricjax("analyze", path, "--json", out, "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Training step: communication by parallel dimension" in proc.stdout
    assert "Training step per policy" in proc.stdout
    report = json.loads(out.read_text())
    record = report["results"][0]
    step = report["steps"][0]
    assert step["policy"] == "ecmp" and step["workload"] == "moe"
    dims = {d["dimension"]: d for d in step["dimensions"]}
    assert list(dims) == ["tp", "pp", "ep", "dp"]
    assert sum(d["time_s"] for d in dims.values()) == pytest.approx(record["completion_s"])
    assert sum(d["share"] for d in dims.values()) == pytest.approx(1.0)
    for d in dims.values():
        assert d["busbw_gbps"] == pytest.approx(d["bytes_per_gpu"] * 8e-9 / d["time_s"])
    assert dims["tp"]["bound_by"] == "scale-up" and dims["tp"]["slowest_group"] is None
    dp = dims["dp"]
    assert dp["bound_by"] == "fabric" and dp["slowest_group"].startswith(("dp ", "edp "))
    assert 1 <= dp["groups_at_slowest"] <= dp["groups_in_phase"]
    assert dp["bottleneck_links"][0]["utilisation"] == pytest.approx(
        max(link["utilisation"] for link in dp["bottleneck_links"]))
    window = 2 / 3 * 0.001
    assert step["overlapped_s"] == pytest.approx(min(dp["time_s"], window))
    assert step["exposed_s"] == pytest.approx(record["completion_s"] - step["overlapped_s"])
    assert step["compute_s"] == pytest.approx((4 + 2 - 1) * 0.001)
    assert step["step_s"] == pytest.approx(step["compute_s"] + step["exposed_s"])
    assert step["dominant"] == max(dims, key=lambda k: dims[k]["time_s"])


def test_slowest_flows_match_the_solver():
    """The host's first level of progressive filling names exactly the flows the solver gives
    the slowest max-min rate (full rounds: every flow's own rate). DP rings at stride 8 cross
    a T0 at every hop, so ECMP collides and only some groups are slowest."""
    from fabricjax.engine.phase import solve_policy_phase
    from fabricjax.fabric.build import build
    from fabricjax.metrics import slowest_flows

    scenario = parse_scenario({"fabric": {"gpus": 64, "planes": 2, "radix": 16}, "seed": 4,
                               "policies": ["ecmp"], "solver": {"rates": "full", "eps": 0},
                               "workload": [{"collective": "training", "model": DENSE,
                                             "parallel": {"tp": 8, "pp": 1}}]})
    fabric = build(scenario)
    collective = build_workload(scenario, np.random.default_rng(0))[0]
    phase = collective.phases[1]
    assert phase.dimension == "dp" and phase.flows.num_flows == 64
    outcome = solve_policy_phase("ecmp", scenario, fabric, phase.flows, (0, 1))
    flags = slowest_flows(fabric, phase.flows, outcome)
    rates = np.asarray(outcome.result.rates, np.float64)
    slowest = rates.min()
    assert np.array_equal(flags, rates <= slowest * (1 + 1e-4))
    groups = np.unique(phase.flows.group[flags])
    assert 0 < groups.shape[0] < 8


def test_sweeps_replan_the_step(tmp_path):
    """`--set workload[0].parallel.tp=...` re-plans the step (dp follows) and the sweep rows
    carry the time per dimension, which adds up to the completion."""
    from fabricjax.scenario import load_scenario
    from fabricjax.sweeps import parse_sets, run_sweep, sweep_points

    path = tmp_path / "s.yaml"
    path.write_text(TINY.replace("policies: [ecmp]", "policies: [spray]"))
    points = sweep_points(load_scenario(path), parse_sets(["workload[0].parallel.tp=2,4"]))
    result = run_sweep(points)
    assert [row["workload[0].parallel.tp"] for row in result.rows] == [2, 4]
    assert {"step_tp_s", "step_pp_s", "step_ep_s", "step_dp_s", "step_exposed_s",
            "step_time_s"} <= set(result.columns)
    for row in result.rows:
        parts = sum(row[f"step_{d}_s"] for d in ("tp", "pp", "ep", "dp"))
        assert parts == pytest.approx(row["completion_s"])
        assert row["step_time_s"] > row["completion_s"]
    # tp 2 and tp 4 of the same GPUs: the TP all-reduces carry the same bytes per GPU over
    # twice the ranks, so the step's TP time changes while the columns stay the same
    assert result.rows[0]["step_tp_s"] != result.rows[1]["step_tp_s"]


@pytest.mark.slow
def test_failure_sets_run_over_a_step(tmp_path):
    """A failure study evaluates every phase of the step: no set is faster than the step
    without failures, and the step report is still the baseline's."""
    from fabricjax.scenario import load_scenario
    from fabricjax.study.analyze import analyze

    path = tmp_path / "s.yaml"
    path.write_text(TINY.replace("policies: [ecmp]", "policies: [spray]") +
                    "failures: {links: {random: 2}, samples: 2, seed: 1}\n")
    report = analyze(load_scenario(path))
    summary = report.failures.summaries[0]
    assert summary.sets == 2 and summary.stalled_sets == 0
    assert summary.completion_s["p50"] >= report.records[0].completion_s * 0.999
    assert report.steps[0].comm_s == report.records[0].completion_s
