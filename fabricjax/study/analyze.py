"""`analyze`: scenario in, one record per (policy, workload item or job) out, for every fabric
kind.

This is the host-side orchestration of the design's data flow: build the fabric and the
workload (numpy), then for every policy and phase one call of the engine's phase program
(`engine.phase.solve_policy_phase`: slots drawn by the policy, one jitted solve, one
transfer in and one out, plus the progressive simulation where it runs), records built by
`metrics`, then the studies that reuse those baselines: jobs sharing the fabric, link
sensitivity, failure sets and the reliability what-if. Training steps and Chakra traces also
get their step record (`metrics.step_record`: time by parallel dimension). Nothing here
branches on a policy's name or on the fabric's kind.
"""

from __future__ import annotations

import platform
from typing import Callable

import jax
import numpy as np

from fabricjax.core.cache import cache_record
from fabricjax.core.version import __version__
from fabricjax.config import Scenario
from fabricjax.core.devices import device_record
from fabricjax.core.stream import header, read_stream
from fabricjax.engine.dynamic import with_dynamic
from fabricjax.engine.phase import solve_policy_phase
from fabricjax.engine.plan import check_resources, simulate_phase
from fabricjax.fabric.build import build, summary
from fabricjax.fabric.failures import check_failures
from fabricjax.metrics import collective_record, step_record
from fabricjax.policies import get
from fabricjax.results import Report
from fabricjax.scenario import result_config
from fabricjax.study.resilience import failure_study, reliability_whatif
from fabricjax.study.sensitivity import link_upgrades
from fabricjax.study.sharing import sharing_rows
from fabricjax.workload.build import build_workload


def versions() -> dict:
    """Versions and the device: what a reader needs to reproduce a report's bytes."""
    return {
        "fabricjax": __version__,
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", jax.__version__),
        "numpy": np.__version__,
        "python": platform.python_version(),
        **device_record(),
        **cache_record(),
    }


FAILURE_STREAM = "fabricjax failure study"


def failure_header(scenario: Scenario) -> dict:
    """The first record of a failure study's stream of per-set records: the validated scenario
    (`scenario.result_config`: failures.chunk left out, since it never changes a result) and
    the device the sets run on (the optimal bound's last float32 bits depend on the device
    count, so a stream is resumed only where it was computed)."""
    device = device_record()
    return header(FAILURE_STREAM, result_config(scenario),
                  {"device": device["device"], "devices_used": device["devices_used"]})


def read_failure_stream(path, expected: dict) -> list[dict]:
    """The per-set records of the stream at `path` (none when there is no file), after its
    header is checked against `expected` (`failure_header`; a StreamError names what
    differs). A record cut short by a kill is dropped from the file."""
    return read_stream(path, expected)[1]


def analyze(scenario: Scenario, *, trace: bool = False,
            progress: Callable[[str, int, int], None] | None = None,
            sensitivity: bool = False, failure_records: list[dict] | None = None,
            on_failure_records: Callable[[list[dict]], None] | None = None) -> Report:
    """Evaluate every policy on every workload item of the scenario, then (when the scenario
    has `failures`) under every failure set, and the reliability what-if.

    `trace`: keep mrc's P100 after every iteration in its records. `failure_records`: the
    per-set records an earlier run of the same study streamed (their sets are skipped);
    `on_failure_records(records)`: called with each chunk of new per-set records as soon as
    it is computed (`study.resilience.failure_study`)."""
    fabric = build(scenario)
    collectives = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    check_resources(scenario, collectives, fabric)
    if scenario.failures is not None:
        check_failures(scenario, fabric)
    total = len(scenario.policies) * sum(len(c.phases) for c in collectives)
    done = 0
    records = []
    steps = []
    baseline = {}
    for policy in scenario.policies:
        for item, collective in enumerate(collectives):
            outcomes = []
            for index, phase in enumerate(collective.phases):
                if progress is not None:
                    progress(f"{policy}: {collective.name} ({phase.name})", done, total)
                dynamic = scenario.solver.model == "dynamic"
                outcome = solve_policy_phase(
                    policy, scenario, fabric, phase.flows, (collective.stream, index),
                    trace=trace,
                    progressive=not dynamic and simulate_phase(scenario, phase.flows, policy))
                if dynamic:     # the flow-level figures from the dynamic level
                    outcome = with_dynamic(policy, scenario, fabric, phase.flows,
                                           (collective.stream, index), outcome)
                outcomes.append(outcome)
                done += 1
            baseline[(policy, item)] = outcomes
            record = collective_record(policy, collective, outcomes, fabric, scenario)
            records.append(record)
            if collective.step is not None:
                steps.append(step_record(record, collective, outcomes, fabric, scenario))
    sharing = None
    jobs = [c for c in collectives if c.job]
    if len(jobs) > 1:
        sharing = []
        for policy in scenario.policies:
            if progress is not None:
                progress(f"{policy}: {len(jobs)} jobs sharing the fabric", done, total)
            sharing += sharing_rows(policy, scenario, fabric, jobs)
    upgrades = None
    if sensitivity:
        if progress is not None:
            progress("link sensitivity", done, total)
        upgrades = link_upgrades(scenario, fabric, collectives, baseline)
    study = reliability = None
    if scenario.failures is not None:
        study = failure_study(scenario, fabric, collectives, baseline, progress=progress,
                              done=failure_records, on_records=on_failure_records)
    if scenario.reliability is not None:
        reliability = reliability_whatif(scenario, fabric, collectives, baseline)
    if progress is not None:
        progress("done", 1, 1)
    return Report(
        scenario=scenario.name,
        seed=scenario.seed,
        fabric=summary(scenario, fabric),
        records=records,
        solver=scenario.solver.model_dump(),
        # failures.chunk only says how many sets share a device call; it never changes a
        # result, so it is left out for the JSON to be byte-identical across chunkings
        config=scenario.model_dump(exclude={"failures": {"chunk"}}),
        failures=study,
        reliability=reliability,
        sharing=sharing,
        sensitivity=upgrades,
        steps=steps or None,
        versions=versions(),
        policies={name: {"label": get(name).display.label,
                         "residual": get(name).display.residual,
                         **get(name).described(scenario)}
                  for name in scenario.policies},
    )
