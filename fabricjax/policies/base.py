"""The one interface every load-balancing policy implements (optax's init/update pair).

Contract. A policy is a small frozen object. On the host, `init` draws the path slots a
phase's flows start with (QPs hashed onto paths, EVs placed) as a `Slots`; on the device,
`react` says what the policy does given the fabric's alive mask and capacities: the split of
every flow over its slots (and the slots it ends on), with iterations, a `Status` and a
residual for the iterative ones. The engine runs `react` in the same jitted phase program for
the no-failure baseline (every link alive) and for every failure set (a mask), on every
fabric kind (the `solver.incidence` routes hide the kind). Besides that pair a policy
declares what the engine and the studies need without asking its name: its RNG stream, slots
per flow, reaction window for the failure transient, which candidate paths it uses on a
stored-path fabric, and whether a phase can be solved as (T0, T0) classes (`class_slots`).

A policy owns its settings: a pydantic model (`settings_model`, its section of a scenario under
the policy's name) whose fields are marked `TRACED` (read by `react` as traced arrays, so a
sweep over them never recompiles), `STATIC` (fixed at compile time: loop bounds, lengths) or
left unmarked (read on the host: slot counts, placement), as equinox marks a field static.
Registering the policy registers the model, so the scenario's schema, the docs and the errors
all come from it. It also declares how it is shown (`Display`: label, colour), its `check`
of the scenario and what it keeps on the device (`memory_profile`, which the planner's
memory model prices).

Nothing outside `fabricjax/policies/` branches on a policy's name: a new policy is one module
that subclasses `Policy` and calls `core.registry.register` (plus one import line in
`policies/__init__.py` for a built-in one).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.config import FabricKind, FailuresConfig, Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.core.roles import STATIC, TRACED, role
from fabricjax.fabric.build import paths_per_pair
from fabricjax.fabric.paths import placed_slots
from fabricjax.scenario import check_sections
from fabricjax.solver.dynamic import held_mix


def _array(value: Any) -> np.ndarray:
    if isinstance(value, bool):
        return np.bool_(value)
    return np.int32(value) if isinstance(value, int) else np.float32(value)


def traced_options(section: Any) -> dict:
    """{field: numpy scalar} of a section's TRACED fields (int32, float32 or bool)."""
    if section is None:
        return {}
    return {name: _array(getattr(section, name)) for name in type(section).model_fields
            if role(section, name) is TRACED}


def static_settings(section: Any) -> tuple:
    """The values of a section's STATIC fields, in their declared order."""
    if section is None:
        return ()
    return tuple(getattr(section, name) for name in type(section).model_fields
                 if role(section, name) is STATIC)


@dataclasses.dataclass(frozen=True)
class Slots:
    """A phase's path slots under one policy (host numpy, F flows, K slots per flow).

    plane: int32[F, K] each slot's plane. choice: int32[F, K] which path of the plane (the
    spine on a Clos, a candidate index on a stored-path fabric). state: further host arrays
    the policy's `react` reads (optimal's commodities), a dict of numpy arrays."""

    plane: np.ndarray
    choice: np.ndarray
    state: dict = dataclasses.field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.plane.shape[1])


class PhaseArrays(NamedTuple):
    """One phase's flows as the device sees them (F flows): src, dst int32[F]; demand
    float32[F] Gbit/s offered; size float32[F] bytes; flow_cap float32[F] Gbit/s (the NIC)."""

    src: jax.Array
    dst: jax.Array
    demand: jax.Array
    size: jax.Array
    flow_cap: jax.Array


class Reaction(NamedTuple):
    """What `react` returns (device arrays).

    choice: int32[F, K] the slots' choices the split uses (mrc: its returned EV set; ecmp: the
    re-hashed QPs). weights: float32[F, K] each flow's split over its slots (sums to 1 over
    live slots, 0 for a flow without one). carried: float32[F] the share of each flow's demand
    the split carries (its rate cap shrinks to match), or None when the whole flow is carried
    on whatever live slots it has. iterations: int32. status: int32 `core.status.Status`
    flags (ITERATION_CAP, SETTLED, LOST_PLANE). residual: float32 (mrc: overload; optimal:
    gap). trace: float32[T] P100 after each iteration (mrc), or None. speeds, final_speed:
    an adapting policy's clock record when `react` was asked for one (`clock_rows`): each
    flow's speed in the sets it passed through, float32[R + 1, F], and in the set it returned,
    float32[F] (`policies.mrc.MrcResult`); else None. resend_tolerance: float32 scalar for a
    sprayer that resends what congested EVs trim (`solver.maxmin.resending_rates`: the share
    of its packets trimmed where its window settles), or None for a split held as given."""

    choice: jax.Array
    weights: jax.Array
    carried: jax.Array | None = None
    iterations: jax.Array = np.int32(0)
    status: jax.Array = np.int32(0)
    residual: jax.Array = np.float32(0.0)
    trace: jax.Array | None = None
    speeds: jax.Array | None = None
    final_speed: jax.Array | None = None
    resend_tolerance: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class Display:
    """How a policy is shown, which nothing computes with: `label`, its one-line description
    in the tables; `residual`, what its residual measures (an iterative policy's column);
    `colour`, its colour in every figure (a matplotlib colour; "" lets the plots pick one);
    `line_style`, its reference line beside another's iteration trace (matplotlib)."""

    label: str = ""
    residual: str = "residual"
    colour: str = ""
    line_style: Any = None


@dataclasses.dataclass(frozen=True)
class Policy:
    """Base class: a static split over the slots `init` draws (override what differs).

    name: the scenario's name for it (and of its settings section). stream: its RNG stream
    id, fixed forever and unique (`core.registry.register` checks), so adding a policy never
    changes another's draws. path_pool: on stored-path fabrics, the candidate paths it
    chooses among ("equal-cost": the shortest only, as ECMP hashes; "candidates": the
    fabric's K shortest). transient: its reaction to a failure is a window during which
    bytes on dead paths are lost (False: a bound, no transport). iterative: it reports
    iterations and how its iteration ended. display: how the reports and figures show it
    (`Display`), apart from what it computes. aggregatable: a uniform phase may be solved as
    (T0, T0) classes (`class_slots`).
    memory_profile: what it keeps on the device, which `engine.plan` prices: "split" (a
    split over its slots), "rehash" (also re-draws slots after a failure), "swap-loop" (an
    iterative loop over every flow's slots), "commodity-loop" (an iterative split over
    commodities and the full slot grid).

    settings_model (a class attribute): its section of a scenario, a pydantic model whose
    fields are marked TRACED or STATIC (or neither: host); None when it has no settings."""

    settings_model: ClassVar[Any] = None

    name: str = "policy"
    stream: int = 0
    path_pool: str = "candidates"
    transient: bool = True
    iterative: bool = False
    gap_certified: bool = False     # its residual is a certified gap on its P100 (a bound)
    display: Display = Display()
    # the dynamic level (engine.dynamic) runs every slot as a connection of its own, with its
    # own bytes and window (ECMP's QPs); else one connection over the slots (a plane's)
    slot_connections: bool = False
    aggregatable: bool = False
    memory_profile: str = "split"

    # ------------------------------------------------------------------ declarations
    def section(self, scenario: Scenario) -> Any:
        """Its settings in `scenario` (an instance of `settings_model`; None without one). A
        scenario parsed before the policies registered is checked now."""
        if self.settings_model is None:
            return None
        if scenario.section(self.name) is None:
            check_sections(scenario)
        return scenario.section(self.name)

    def check(self, scenario: Scenario) -> None:
        """Refuse (ScenarioError naming the field) what its settings model cannot say alone,
        e.g. a count that must divide evenly over the fabric's planes."""

    def slots_per_flow(self, scenario: Scenario) -> int:
        """K: the path slots each flow carries on the scenario's fabric (before building it:
        the memory estimate asks)."""
        raise NotImplementedError

    def path_field(self, scenario: Scenario) -> tuple[str, str, int] | None:
        """(section, field, step) of the scenario field that sets `slots_per_flow`, for the
        memory check's "would fit" advice (None: nothing to lower)."""
        return None

    def init_stream(self) -> int:
        """The stream `init` draws from (mrc starts from spraying's draw)."""
        return self.stream

    def pool(self, scenario: Scenario) -> str:
        """The candidate paths it chooses among on a stored-path fabric (`path_pool` unless
        an option changes it: hashed EVs stay on the equal-cost paths, as switch hashes do)."""
        return self.path_pool

    def described(self, scenario: Scenario) -> dict:
        """Model choices a report states next to the policy's name (e.g. spraying's EV
        placement); {} when there are none."""
        return {}

    def reaction_window_s(self, failures: FailuresConfig) -> float | None:
        """How long an affected flow's lost bytes stay lost (None: no transient)."""
        return failures.reconvergence_s if self.transient else None

    def options(self, scenario: Scenario) -> dict:
        """Options `react` reads as traced arrays (a sweep over them never recompiles): its
        section's TRACED fields."""
        return traced_options(self.section(scenario))

    def failure_options(self, scenario: Scenario) -> dict:
        """`options` for a failure set, which starts from the no-failure outcome (a warm
        start); the same by default."""
        return self.options(scenario)

    def settings(self, scenario: Scenario) -> tuple:
        """Hashable options that fix array shapes or loop bounds (static under jit): its
        section's STATIC fields."""
        return static_settings(self.section(scenario))

    def clock_rows(self, scenario: Scenario) -> int:
        """Rows of the per-flow speed record `react` keeps so that a flow is charged for the
        states the policy passes through before it settles (`engine.timing.clocked_durations`);
        0 for a policy whose split holds from a phase's first packet."""
        return 0

    def convergence(self, status: int, iterations: int = 0) -> str | None:
        """How an iterative policy's iteration ended, in words (None if not iterative)."""
        return None

    def ev_mix(self, scenario: Scenario) -> Callable:
        """Its reaction at ACK time in the dynamic level: the EV mix its senders draw from, a
        function of `solver.dynamic.EvSignals` (static under jit; a module-level function, so
        that the compiled program's key names it). By default the split `react` gives, held
        for the phase (`held_mix`)."""
        return held_mix

    def start_in_time(self, slots: Slots, split: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """(choice int32[F, K], share float64[F, K] or None) the dynamic level starts a phase
        from, given its initial `slots` and the static level's `split` (`engine.phase`'s
        PhaseSplit, ECMP's re-hashed after a failure): that split by default; a share of None
        is an equal split over the live slots (a policy whose EV mix adapts in time starts
        from its initial slots, not from the static level's fixed point)."""
        return np.asarray(split.choice), np.asarray(split.weights, np.float64)

    def class_slots(self, geometry: Any, classes: Any, scenario: Scenario,
                    rng: np.random.Generator):
        """(class_slots [C, P, S or 1], slots per plane [P]) of a phase solved as (source T0,
        destination T0) classes, or None when the policy keeps per-flow state and cannot be."""
        return None

    # ------------------------------------------------------------------ host and device
    def init(self, scenario: Scenario, fabric: Any, flows: Any, routes: Any,
             rng: np.random.Generator) -> Slots:
        """The slots a phase's flows start with (host). `routes`: the phase's host routes
        (a `solver.incidence.StoredRoutes` of numpy arrays on stored-path fabrics, None on a
        Clos, whose paths follow from the geometry)."""
        raise NotImplementedError

    def react(self, routes: Any, phase: PhaseArrays, plane, choice, state: dict, alive,
              capacity, key, options: dict, settings: tuple, layout: tuple,
              clock_rows: int = 0) -> Reaction:
        """The split on the device (traced): equal over the live slots; override to adapt.
        alive bool[L] and capacity float32[L] cover the real links; key: a PRNG key;
        options / settings: what `options` and `settings` gave; layout: the fabric's four
        structural (start, stop) link ranges, host -> switch, switch up, switch down, switch ->
        host (static). clock_rows (static): rows of the speed record an adapting policy keeps
        for the clock (`Policy.clock_rows`; 0: none, and a policy that adapts at once ignores
        it)."""
        alive_ext = jnp.concatenate([alive, jnp.array([True])])
        return Reaction(choice=choice, weights=routes.live_split(plane, choice, alive_ext))

    def restart(self, routes: Any, phase: PhaseArrays, plane, choice, state: dict, alive,
                capacity, key, options: dict, settings: tuple, layout: tuple) -> Reaction:
        """`react` for a failure set, which starts from the no-failure outcome's slots (the
        warm start; options from `failure_options`): the same reaction, which a policy may
        compute a faster way for what a failure record reports (the iteration trace may be
        left out). `react` by default."""
        return self.react(routes, phase, plane, choice, state, alive, capacity, key, options,
                          settings, layout)


# Where a spraying policy's entropy values land. routed: the sender names each EV's path
# (MRC's SRv6 source routes), distinct and even across a plane's spines; hashed: every switch
# hashes the EV onto an uplink (UEC fabrics, htsim), independently and with replacement.
PLACEMENT_HELP = ("Where the EVs land: routed (the sender names each path, as SRv6 source "
                  "routes do: distinct and even across a plane's spines) or hashed (every "
                  "switch hashes the EV onto an uplink, as UEC fabrics and htsim do: "
                  "independently, with replacement).")


def uses_evs(section: Any, scenario: Scenario) -> bool:
    """Whether a spraying policy (its settings `section`) carries `evs` slots
    per flow: always on a Clos, and when hashed on a stored-path fabric (EVs hashed onto the
    equal-cost paths); routed on a stored-path fabric it uses each candidate path once."""
    return scenario.fabric.kind == FabricKind.CLOS or section.placement == "hashed"


@dataclasses.dataclass(frozen=True)
class Spraying(Policy):
    """What every policy that sprays a flow over entropy values shares (spray, and mrc, which
    starts from spraying's draw): its section's `evs` EVs per flow, split equally over the
    planes and placed by its `placement` (routed or hashed) on a Clos; on a stored-path
    fabric the candidate paths once each (routed) or `evs` EVs hashed onto the equal-cost
    ones. A subclass's `settings_model` has `evs` and `placement` fields."""

    def check(self, scenario: Scenario) -> None:
        """EVs are assigned equally per plane, so their count must divide evenly (a graph
        file declares no planes: any count)."""
        if not FabricKind(scenario.fabric.kind).planes_by_construction:
            return
        planes = scenario.fabric.planes
        evs = self.section(scenario).evs
        if evs % planes:
            raise ScenarioError(
                f"{self.name}.evs",
                f"{evs} EVs cannot be split equally over {planes} planes; allowed: "
                f"multiples of fabric.planes ({planes}, {2 * planes}, ..., "
                f"e.g. {planes * max(1, round(evs / planes))})")

    def slots_per_flow(self, scenario: Scenario) -> int:
        """Its EVs, or the fabric's candidate paths."""
        section = self.section(scenario)
        return section.evs if uses_evs(section, scenario) else paths_per_pair(scenario)

    def path_field(self, scenario: Scenario) -> tuple[str, str, int]:
        """Its EVs (a multiple of the planes on a Clos or fat tree), or the fabric's
        candidate paths when it sprays over them."""
        cfg = scenario.fabric
        step = cfg.planes if FabricKind(cfg.kind).planes_by_construction else 1
        if uses_evs(self.section(scenario), scenario):
            return self.name, "evs", step
        return "fabric", "paths", step

    def pool(self, scenario: Scenario) -> str:
        """Hashed EVs land on equal-cost paths only."""
        return "equal-cost" if self.section(scenario).placement == "hashed" else "candidates"

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        """The initial EVs on any fabric."""
        section = self.section(scenario)
        if routes is None:
            return Slots(*placed_slots(fabric.geometry, flows.num_flows, section.evs,
                                       section.placement, rng))
        if section.placement == "hashed":
            return Slots(*hashed_stored_slots(routes, section.evs, rng))
        return Slots(*stored_spray_slots(routes))


def hashed_stored_slots(routes: Any, num_slots: int, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(plane, choice) int32[F, K] on a stored-path fabric: slot k on plane k % P, its path
    drawn uniformly and independently among the plane's distinct candidates (a flow with no
    candidate on that plane, e.g. a graph whose planes are unknown, draws among all of its
    distinct candidates)."""
    num_flows = routes.plane.shape[0]
    planes = routes.planes
    slot_plane = np.broadcast_to(np.arange(num_slots) % planes, (num_flows, num_slots))
    rows = np.arange(num_flows)[:, None]
    count = routes.group_count[rows, slot_plane]
    start = routes.group_start[rows, slot_plane]
    uniform = rng.random((num_flows, num_slots))
    in_plane = routes.by_plane[rows, start + (uniform * np.maximum(count, 1)).astype(np.int64)]
    anywhere = (uniform * np.maximum(routes.distinct, 1)[:, None]).astype(np.int64)
    choice = np.where(count > 0, in_plane, anywhere).astype(np.int32)
    plane = np.take_along_axis(routes.plane, choice, axis=1).astype(np.int32)
    return plane, choice


def stored_spray_slots(routes: Any) -> tuple[np.ndarray, np.ndarray]:
    """(plane, choice) int32[F, C] on a stored-path fabric: every candidate slot once (a flow
    with d < C distinct paths repeats them cyclically, so its first C mod d get one more)."""
    num_flows, num_cand = routes.plane.shape
    choice = np.broadcast_to(np.arange(num_cand, dtype=np.int32), (num_flows, num_cand))
    return np.ascontiguousarray(routes.plane, np.int32), np.ascontiguousarray(choice)
