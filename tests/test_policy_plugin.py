"""A policy with options is one file: a toy policy, its settings model and its registration
live in this test file alone, and its section reaches the schema, the loader's errors,
`analyze`, a failure study and a sweep over one of its options. Also: the registry refuses a
stream id already taken, and no module outside `fabricjax/policies/` names a policy."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import jax
import jax.numpy as jnp
import pytest
from pydantic import Field

from fabricjax.config import Strict, scenario_schema
from fabricjax.core.errors import ScenarioError
from fabricjax.core.registry import known_names, register, unregister
from fabricjax.fabric.paths import placed_slots
from fabricjax.policies import get
from fabricjax.core.roles import STATIC, TRACED, role
from fabricjax.policies.base import Display, Policy, Reaction, Slots
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.sweeps import parse_sets, run_sweep, sweep_points

REPO = Path(__file__).resolve().parents[1]


class LeanSettings(Strict):
    """A toy: every flow sprays over `evs` routed EVs but puts an extra `lean` on its first
    live one."""

    evs: int = Field(8, ge=1, le=64, description="EVs per flow.")
    lean: Annotated[float, TRACED] = Field(0.0, ge=0.0, le=100.0, description=(
        "Extra weight on the first live EV, relative to the others' 1."))


@dataclasses.dataclass(frozen=True)
class Lean(Policy):
    settings_model = LeanSettings

    name: str = "lean"
    stream: int = 91
    display: Display = Display(label="spraying that leans on its first EV (a toy)",
                               colour="#ff00ff")

    def slots_per_flow(self, scenario) -> int:
        return self.section(scenario).evs

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        return Slots(*placed_slots(fabric.geometry, flows.num_flows,
                                   self.section(scenario).evs, "routed", rng))

    def react(self, routes, phase, plane, choice, state, alive, capacity, key, options,
              settings, layout) -> Reaction:
        links = routes.slot_links(plane, choice)
        live = jnp.all(jnp.concatenate([alive, jnp.array([True])])[links], axis=-1)
        first = jax.nn.one_hot(jnp.argmax(live, axis=1), choice.shape[1], dtype=jnp.float32)
        raw = live * (1.0 + options["lean"] * first)
        return Reaction(choice=choice,
                        weights=raw / jnp.maximum(raw.sum(axis=1, keepdims=True), 1e-30))


@pytest.fixture
def lean():
    policy = register(Lean())
    yield policy
    unregister(policy.name)


def toy_scenario(**extra) -> dict:
    return {"fabric": {"gpus": 16, "planes": 2, "radix": 8}, "seed": 5,
            "workload": [{"collective": "permutation", "shift": 4, "size": "4MiB"}],
            "policies": ["lean", "spray"], "spray": {"evs": 8}, **extra}


def test_the_section_comes_from_the_registry(lean):
    scenario = parse_scenario(toy_scenario(lean={"lean": 2.0}))
    assert scenario.lean == LeanSettings(lean=2.0) and scenario.section("lean").evs == 8
    assert get("lean").options(scenario) == {"lean": pytest.approx(2.0)}
    assert get("lean").settings(scenario) == ()
    # the defaults are filled in when the section is left out, and reach the report's config
    assert parse_scenario(toy_scenario()).model_dump()["lean"] == {"evs": 8, "lean": 0.0}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(toy_scenario(lean={"lean": -1}))
    assert err.value.field == "lean.lean" and "greater than or equal to 0" in err.value.message
    with pytest.raises(ScenarioError) as err:
        parse_scenario(toy_scenario(lean={"lien": 1}))
    assert err.value.field == "lean.lien" and "allowed: evs, lean" in err.value.message
    schema = scenario_schema()
    section = schema["$defs"]["LeanSettings"]
    assert section["properties"]["lean"]["description"].startswith("Extra weight")
    assert "lean" in schema["properties"] and "lean" in schema["properties"]["policies"][
        "items"]["enum"]
    unregister("lean")
    assert "lean" not in scenario_schema()["properties"]
    with pytest.raises(ScenarioError) as err:      # gone with its policy
        parse_scenario({**toy_scenario(), "policies": ["spray"], "lean": {}})
    assert err.value.field == "lean" and "unknown field 'lean'" in err.value.message


def test_the_toy_runs_through_analyze_failures_and_a_sweep(lean):
    """Leaning puts more than an even share on the first EV's path: the same permutation
    (each GPU's flow alone on its NIC ports) loads its busiest port by 2 x (1 + lean) / (evs
    + lean) of the port rate's even share; a failure study runs it over failure sets; a
    sweep over `lean.lean` reproduces `analyze`'s number."""
    evs, lean_by = 8, 3.0
    scenario = parse_scenario(toy_scenario(
        lean={"lean": lean_by}, failures={"links": 1, "samples": 2}))
    report = analyze(scenario)
    toy, spray = report.records
    assert toy.policy == "lean" and toy.paths_per_flow == evs
    # host links: a flow's 1 / planes share per port, its first EV's port carries (1 + lean)
    # of evs / planes EVs' worth: (1 + lean) / (evs + lean) x planes of the port's even load
    even = spray.utilisation_by_tier["gpu-t0"]["p100"]
    assert toy.utilisation_by_tier["gpu-t0"]["p100"] == pytest.approx(
        even * 2 * ((1 + lean_by) + (evs // 2 - 1)) / (evs + lean_by), rel=1e-4)
    sets = [r for r in report.failures.records if r["policy"] == "lean"]
    assert len(sets) == 2 and all(r["status"] == "ok" for r in sets)

    points = sweep_points(parse_scenario(toy_scenario()), parse_sets(["lean.lean=0,3"]))
    assert [p.scenario.lean.lean for p in points] == [0.0, 3.0]
    p100 = {(r["point"], r["policy"]): r["p100_utilisation"] for r in run_sweep(points).rows}
    assert p100[0, "lean"] == pytest.approx(p100[0, "spray"], rel=1e-4)   # no lean: even
    # leaning 3 in the sweep is what `analyze` found above (the traced option reaches it)
    assert p100[1, "lean"] == pytest.approx(toy.p100_utilisation, rel=1e-5)
    assert p100[1, "lean"] > p100[0, "lean"] * (1 + 1e-3)


def test_markers_say_what_react_reads():
    """MRC's traced options and static settings come from the markers on its fields."""
    scenario = parse_scenario({"workload": [{"collective": "permutation"}],
                               "mrc": {"patience": 7, "max_iters": 9}})
    section = scenario.mrc
    traced = [f for f in type(section).model_fields if role(section, f) is TRACED]
    static = [f for f in type(section).model_fields if role(section, f) is STATIC]
    assert set(get("mrc").options(scenario)) == set(traced) and "patience" in traced
    assert get("mrc").settings(scenario) == tuple(getattr(section, f) for f in static) == (9,)
    assert get("mrc").failure_options(scenario)["patience"] == section.failure_patience


def test_a_taken_stream_is_refused(lean):
    with pytest.raises(ValueError, match="stream 91 is already 'lean'"):
        register(dataclasses.replace(Lean(), name="lean-twin"))
    assert "lean-twin" not in known_names()
    register(dataclasses.replace(Lean(), display=Display(label="again")))  # replaces itself
    assert get("lean").display.label == "again"


# the policies' names; every other module asks the registry
NAMES = {get(name).name for name in known_names()} | {"ecmp", "spray", "mrc", "optimal"}


def literals_naming_a_policy(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "fabricjax").rglob("*.py")):
        if "policies" in path.relative_to(root).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_outside_the_policies_names_one(tmp_path):
    assert literals_naming_a_policy(REPO) == []
    planted = tmp_path / "fabricjax" / "report"
    planted.mkdir(parents=True)
    (planted / "plots.py").write_text('COLOURS = {"mrc": "green"}\n')
    assert literals_naming_a_policy(tmp_path) == ["fabricjax/report/plots.py:1: 'mrc'"]


BEFORE_REGISTRATION = '''
import sys
from fabricjax.core.errors import ScenarioError
from fabricjax.scenario import check_sections, parse_scenario, with_overrides
base = {"workload": [{"collective": "permutation"}], "fabric": {"gpus": 16, "radix": 8}}
bad = parse_scenario({**base, "mrc": {"evz": 3}})          # kept as given: nothing registered
good = with_overrides(parse_scenario({**base, "spray": {"evs": 16}}), seed=4)
assert "jax" not in sys.modules
import fabricjax.policies
try:
    check_sections(bad)
    raise SystemExit("not refused")
except ScenarioError as err:
    assert err.field == "mrc.evz", err
check_sections(good)
assert good.spray.evs == 16 and good.mrc.evs == 128 and good.seed == 4
assert good.policies == ["ecmp", "spray", "mrc", "optimal"], good.policies
assert list(good.model_dump())[5:10] == ["policies", "ecmp", "spray", "mrc", "optimal"]
print("ok")
'''


def test_a_scenario_parsed_before_the_policies_registered_is_checked_later():
    """A process that solves nothing (`fabricjax topo`) parses without the policies, so
    without JAX; the sections are checked, and the default policies filled in, once they are
    registered (the engine's memory check does it)."""
    proc = subprocess.run([sys.executable, "-c", BEFORE_REGISTRATION], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr + proc.stdout
