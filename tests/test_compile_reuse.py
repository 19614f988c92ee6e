"""Compile once, reuse everywhere: a second scenario whose phases fall in the same
shape bucket traces and compiles nothing new, whatever its seed, sizes, job size or swept
options; the padding that makes the buckets changes no number.

Tracing is counted with JAX's own monitoring events (a trace happens on every miss of the
in-memory cache of compiled programs, whether or not the persistent cache then supplies the
binary), so the count does not depend on the suite's compilation cache.
"""

from __future__ import annotations

import collections
import dataclasses

import jax.monitoring
import numpy as np
import pytest

from fabricjax.engine.plan import flow_bucket, padded_flows
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_events: collections.Counter = collections.Counter()


def _listen(event: str, duration: float, **_) -> None:
    _events[event] += 1


jax.monitoring.register_event_duration_secs_listener(_listen)


def _traces() -> int:
    return _events[TRACE_EVENT]


def _scenario(job_gpus: int, *, seed: int, size: str, policies: list[str], **sections):
    return parse_scenario({
        "name": "reuse", "seed": seed,
        "fabric": {"kind": "multiplane-clos", "gpus": 64, "planes": 2, "radix": 16,
                   "port_gbps": "100G"},
        "workload": [{"name": "perm", "collective": "permutation", "size": size,
                      "gpus": job_gpus}],
        "policies": policies, "spray": {"evs": 8}, "mrc": {"evs": 8, "max_iters": 40},
        **sections})


def test_flow_buckets_are_few_and_tight():
    """At most 25% padding, none for powers of two, four buckets per doubling."""
    counts = np.arange(1, 70_000)
    buckets = np.array([flow_bucket(int(n)) for n in counts])
    assert np.all(buckets >= counts)
    assert np.all(buckets <= np.ceil(1.25 * counts))
    assert all(flow_bucket(2**k) == 2**k for k in range(20))
    octaves = (counts > 1024) & (counts <= 65536)           # 1,025..65,536: 6 doublings
    assert len(set(buckets[octaves].tolist())) == 4 * 6
    # only a Clos pads (stored-path fabrics carry per-flow routes from the host)
    fat = parse_scenario({"fabric": {"kind": "fat-tree", "tiers": 3, "gpus": 128, "radix": 8},
                          "workload": [{"collective": "permutation", "size": "1MiB"}]})
    assert padded_flows(fat, 11) == 11


# each policy compiles its own programs for three fabrics (8 s with a cold compilation cache):
# the quick run keeps mrc, the policy with the most programs; `make test-slow` runs all
@pytest.mark.parametrize("policy", [pytest.param("ecmp", marks=pytest.mark.slow),
                                    pytest.param("spray", marks=pytest.mark.slow), "mrc"])
def test_a_second_scenario_of_the_same_bucket_compiles_nothing_new(policy):
    """50 and 53 GPUs (both 56 flows once padded), another seed, another size, another mrc
    threshold: the second analysis (progressive simulation included) traces no program."""
    first = _scenario(50, seed=1, size="4MiB", policies=[policy])
    second = _scenario(53, seed=2, size="16MiB", policies=[policy],
                       mrc={"evs": 8, "max_iters": 40, "threshold": 0.9})
    assert padded_flows(first, 50) == padded_flows(second, 53) == 56
    analyze(first)
    before = _traces()
    report = analyze(second)
    assert _traces() == before, f"{_traces() - before} program(s) traced for the second"
    # the run itself happened: a finished permutation with its progressive figures
    (record,) = report.records
    assert record.completion_s is not None and record.completion_s > 0
    # and a job of another bucket (60 GPUs: 64 flows) does trace: the count is not blind
    analyze(_scenario(60, seed=3, size="4MiB", policies=[policy]))
    assert _traces() > before


@pytest.mark.parametrize("policy", [pytest.param("ecmp", marks=pytest.mark.slow),
                                    pytest.param("spray", marks=pytest.mark.slow), "mrc"])
def test_padding_changes_no_number(policy, monkeypatch):
    """The same scenario solved padded (53 flows in 56) and exactly (the bucket switched off)
    gives the same records, progressive simulation included."""
    from fabricjax.engine import phase as phase_module

    scenario = _scenario(53, seed=5, size="8MiB", policies=[policy])
    padded = analyze(scenario)
    monkeypatch.setattr(phase_module, "padded_flows", lambda scenario, n: n)
    exact = analyze(scenario)
    for a, b in zip(padded.records, exact.records):
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            if isinstance(x, float):
                assert x == pytest.approx(y, rel=1e-5, abs=1e-9), field.name
            elif isinstance(x, (int, str, bool, type(None))):
                assert x == y, field.name


def test_the_dynamic_level_compiles_nothing_new_for_a_second_scenario_of_the_bucket():
    """The dynamic level pads its senders to the same buckets (`engine.dynamic.padded_senders`):
    50 and 53 GPUs, other seeds and sizes, trace no program the second time; a job of
    another bucket does."""
    dynamic = {"solver": {"model": "dynamic"}}
    first = _scenario(50, seed=1, size="4MiB", policies=["mrc"], **dynamic)
    second = _scenario(53, seed=2, size="6MiB", policies=["mrc"], **dynamic)
    analyze(first)
    before = _traces()
    report = analyze(second)
    assert _traces() == before, f"{_traces() - before} program(s) traced for the second"
    (record,) = report.records
    assert record.dynamic is not None and record.dynamic["completion_s"] > 0
    analyze(_scenario(60, seed=3, size="4MiB", policies=["mrc"], **dynamic))
    assert _traces() > before
