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

Nothing outside `fabricjax/policies/` branches on a policy's name: a new policy is one module
that subclasses `Policy` and calls `core.registry.register` (plus one import line in
`policies/__init__.py` for a built-in one).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.config import FailuresConfig, Scenario
from fabricjax.fabric.paths import placed_slots
from fabricjax.solver.maxmin import uniform_live_split


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
    gap). trace: float32[T] P100 after each iteration (mrc), or None."""

    choice: jax.Array
    weights: jax.Array
    carried: jax.Array | None = None
    iterations: jax.Array = np.int32(0)
    status: jax.Array = np.int32(0)
    residual: jax.Array = np.float32(0.0)
    trace: jax.Array | None = None


@dataclasses.dataclass(frozen=True)
class Policy:
    """Base class: a static split over the slots `init` draws (override what differs).

    name: the scenario's name for it. stream: its RNG stream id, fixed forever, so adding a
    policy never changes another's draws. path_pool: on stored-path fabrics, the candidate
    paths it chooses among ("equal-cost": the shortest only, as ECMP hashes; "candidates":
    the fabric's K shortest). transient: its reaction to a failure is a window during which
    bytes on dead paths are lost (False: a bound, no transport). iterative: it reports
    iterations and how its iteration ended. label: the table's one-line description."""

    name: str = "policy"
    stream: int = 0
    path_pool: str = "candidates"
    transient: bool = True
    iterative: bool = False
    gap_certified: bool = False     # its residual is a certified gap on its P100 (a bound)
    residual_name: str = "residual"  # what its residual measures, for the tables
    label: str = ""
    # What the engine plans with (engine.plan). aggregatable: a uniform phase may be solved
    # as (T0, T0) classes (`class_slots`). max_pairs: the most flow-slot pairs of one phase it
    # can hold flow by flow (None: no limit beyond memory). The memory model's coefficients,
    # peak resident bytes measured by bench/memory_calibration.py and rounded up: per
    # flow-slot entry of a solve, for its compiled programs, and extra per flow-slot entry of
    # one failure set (its candidate draws).
    # Its reaction at ACK time in the dynamic level (engine.dynamic): "fixed" keeps the split
    # `react` gives (ECMP's QPs, spraying's EV cycle); "recycle" starts from an equal split over
    # the live slots and moves bytes off EVs that come back marked or trimmed (MRC, REPS).
    feedback: str = "fixed"
    aggregatable: bool = False
    max_pairs: int | None = None
    bytes_per_slot: int = 80
    compiled_bytes: int = 50 * 2**20
    failure_bytes_per_slot: int = 0

    # ------------------------------------------------------------------ declarations
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
        """Options `react` reads as traced arrays (a sweep over them never recompiles)."""
        return {}

    def failure_options(self, scenario: Scenario) -> dict:
        """`options` for a failure set, which starts from the no-failure outcome (a warm
        start); the same by default."""
        return self.options(scenario)

    def settings(self, scenario: Scenario) -> tuple:
        """Hashable options that fix array shapes or loop bounds (static under jit)."""
        return ()

    def convergence(self, status: int, iterations: int = 0) -> str | None:
        """How an iterative policy's iteration ended, in words (None if not iterative)."""
        return None

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
              capacity, key, options: dict, settings: tuple, layout: tuple) -> Reaction:
        """The split on the device (traced): equal over the live slots; override to adapt.
        alive bool[L] and capacity float32[L] cover the real links; key: a PRNG key;
        options / settings: what `options` and `settings` gave; layout: the fabric's four
        structural (start, stop) link ranges, host -> switch, switch up, switch down, switch ->
        host (static)."""
        links = routes.slot_links(plane, choice)
        alive_ext = jnp.concatenate([alive, jnp.array([True])])
        return Reaction(choice=choice, weights=uniform_live_split(links, alive_ext))


def uses_evs(section: Any, scenario: Scenario) -> bool:
    """Whether a spraying policy (its config `section`: `spray` or `mrc`) carries `evs` slots
    per flow: always on a Clos, and when hashed on a stored-path fabric (EVs hashed onto the
    equal-cost paths); routed on a stored-path fabric it uses each candidate path once."""
    return scenario.fabric.kind == "multiplane-clos" or section.placement == "hashed"


def spraying_slots(section: Any, scenario: Scenario) -> int:
    """`slots_per_flow` of a spraying policy: its EVs, or the fabric's candidate paths."""
    return section.evs if uses_evs(section, scenario) else scenario.fabric.paths


def evs_field(name: str, scenario: Scenario) -> tuple[str, str, int]:
    """`path_field` of a spraying policy (`name` its section): its EVs (a multiple of the
    planes on a Clos or fat tree), or the fabric's candidate paths when it sprays over them."""
    cfg = scenario.fabric
    step = cfg.planes if cfg.kind in ("multiplane-clos", "fat-tree") else 1
    if uses_evs(getattr(scenario, name), scenario):
        return name, "evs", step
    return "fabric", "paths", step


def spraying_pool(section: Any) -> str:
    """`pool` of a spraying policy: hashed EVs land on equal-cost paths only."""
    return "equal-cost" if section.placement == "hashed" else "candidates"


def spraying_init(section: Any, scenario: Scenario, fabric: Any, flows: Any, routes: Any,
                  rng: np.random.Generator) -> Slots:
    """The initial EVs of a spraying policy (`section`: its config) on any fabric."""
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
