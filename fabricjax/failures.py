"""Failure sets: what failed, drawn on the host, applied as masks on the device.

Contract:
  * A failure set is a set of failed *components*: fabric cables (a T0-T1 cable, both
    directions), NIC ports (one GPU's cable on one plane, both directions), switches (every link
    of the switch), whole planes (every switch of the plane) and degraded cables (alive at a
    fraction of their capacity). `sample_failures` draws `samples` sets from the scenario's
    `failures` section (explicit names, random counts, per-component probabilities; seeded) and
    returns them as a `FailureBatch`: padded id lists, never [B, L] masks on the host.
  * On the device `failure_mask` turns one set's id lists into the alive mask and capacities of
    every link. The fabric is never rebuilt, and the id lists are padded to power-of-two
    lengths, so a new failure set of the same size reuses the compiled code.
  * `solve_failure_chunk` evaluates one policy's reaction over a chunk of sets in one jitted,
    vmapped call, and returns per-set summaries (`SetOutcome`), not per-set flow arrays.

Reaction model (README, "Failures"): ECMP after reconvergence re-hashes only the queue pairs
whose path died onto a live spine of the same plane (resilient hashing); oblivious spraying
drops the dead EVs and sprays over the rest; MRC re-runs its fixed point from its pre-failure EV
set with the failure applied (dead EVs replaced in their plane, EVs behind a dead NIC port
retired); the optimal bound re-solves. A flow is *affected* when one of its pre-failure paths
crosses a dead link: its bytes there are lost until the policy reacts (the transient).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.errors import ScenarioError
from fabricjax.fabric import ClosGeometry, clos_geometry
from fabricjax.paths import clos_incidence, clos_path_links, fabric_hops_alive
from fabricjax.scenario import FailureKindConfig, FailuresConfig, Scenario
from fabricjax.solver import evaluate_split, uniform_live_split

KINDS = ("links", "switches", "nic_ports", "planes", "degraded")
STALLED_SHOWN = 8          # stalled flows reported by index per set
REHASH_DRAWS = 16          # ECMP re-hash: candidate spines tried; the first live one is taken

_CABLE_UP = re.compile(r"^plane(\d+)/t0-(\d+)/up(\d+)$")
_CABLE_DOWN = re.compile(r"^plane(\d+)/t1-(\d+)/down(\d+)$")
_PORT = re.compile(r"^plane(\d+)/gpu(\d+)(?:/(up|down))?$")
_SWITCH = re.compile(r"^plane(\d+)/(t0|t1)-(\d+)$")
_PLANE = re.compile(r"^plane(\d+)$")


# --------------------------------------------------------------------------- components

@dataclasses.dataclass(frozen=True)
class Component:
    """One failed component: its readable name, the directed links it kills (or degrades)
    and the switch node ids it kills."""

    name: str
    links: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()


def _cable(g: ClosGeometry, p: int, t: int, s: int) -> Component:
    return Component(f"plane{p}/t0-{t}/up{s}",
                     links=(int(g.t0_up(p, t, s)), int(g.t1_down(p, t, s))))


def _port(g: ClosGeometry, p: int, gpu: int) -> Component:
    return Component(f"plane{p}/gpu{gpu}", links=(int(g.gpu_up(p, gpu)), int(g.gpu_down(p, gpu))))


def _t0_node(g: ClosGeometry, p: int, t: int) -> int:
    return g.gpus + p * g.t0s + t


def _t1_node(g: ClosGeometry, p: int, s: int) -> int:
    return g.gpus + g.planes * g.t0s + p * g.spines + s


def _switch(g: ClosGeometry, p: int, tier: str, index: int) -> Component:
    node = _t0_node(g, p, index) if tier == "t0" else _t1_node(g, p, index)
    return Component(f"plane{p}/{tier}-{index}", nodes=(node,))


def _plane(g: ClosGeometry, p: int) -> Component:
    nodes = [_t0_node(g, p, t) for t in range(g.t0s)] + [_t1_node(g, p, s)
                                                          for s in range(g.spines)]
    return Component(f"plane{p}", nodes=tuple(nodes))


def _ranges(g: ClosGeometry) -> str:
    return (f"planes 0..{g.planes - 1}, t0 0..{g.t0s - 1}, t1 0..{g.spines - 1}, "
            f"gpu 0..{g.gpus - 1}")


def parse_component(g: ClosGeometry, kind: str, name: str, field: str) -> Component:
    """The component a readable name denotes, for a failure kind; a ScenarioError otherwise."""
    def bad(what: str) -> ScenarioError:
        return ScenarioError(field, f"{name!r} is not {what} of this fabric ({_ranges(g)})")

    def check(p: int, **bounds: tuple[int, int]) -> None:
        if not 0 <= p < g.planes or any(not 0 <= v < hi for v, hi in bounds.values()):
            raise bad("a component")

    if not isinstance(name, str):
        raise ScenarioError(field, f"expected a name such as plane0/t0-3/up5, got {name!r}")
    if kind in ("links", "degraded"):
        m = _CABLE_UP.match(name) or _CABLE_DOWN.match(name)
        if m:
            p, a, b = (int(x) for x in m.groups())
            t, s = (a, b) if m.re is _CABLE_UP else (b, a)
            check(p, t=(t, g.t0s), s=(s, g.spines))
            return _cable(g, p, t, s)
        m = _PORT.match(name)
        if m and m.group(3) is not None:       # a host cable by its link name
            p, gpu = int(m.group(1)), int(m.group(2))
            check(p, gpu=(gpu, g.gpus))
            return _port(g, p, gpu)
        raise ScenarioError(field, f"{name!r} is not a link name; allowed: plane<p>/t0-<t>/up<s>,"
                                   f" plane<p>/t1-<s>/down<t>, plane<p>/gpu<g>/up|down "
                                   f"({_ranges(g)})")
    if kind == "nic_ports":
        m = _PORT.match(name)
        if not m:
            raise ScenarioError(field, f"{name!r} is not a NIC port name; allowed: "
                                       f"plane<p>/gpu<g> ({_ranges(g)})")
        p, gpu = int(m.group(1)), int(m.group(2))
        check(p, gpu=(gpu, g.gpus))
        return _port(g, p, gpu)
    if kind == "switches":
        m = _SWITCH.match(name)
        if not m:
            raise ScenarioError(field, f"{name!r} is not a switch name; allowed: "
                                       f"plane<p>/t0-<t>, plane<p>/t1-<s> ({_ranges(g)})")
        p, tier, index = int(m.group(1)), m.group(2), int(m.group(3))
        check(p, i=(index, g.t0s if tier == "t0" else g.spines))
        return _switch(g, p, tier, index)
    if kind == "planes":
        m = _PLANE.match(name)
        if not m:
            raise ScenarioError(field, f"{name!r} is not a plane; allowed: plane<p> or <p> "
                                       f"with p in 0..{g.planes - 1}")
        p = int(m.group(1))
        check(p)
        return _plane(g, p)
    raise ValueError(kind)  # pragma: no cover


def population(g: ClosGeometry, kind: str, cfg: FailureKindConfig) -> int:
    """How many components of `kind` random draws choose from."""
    if kind in ("links", "degraded"):
        return g.planes * g.t0s * g.spines
    if kind == "nic_ports":
        return g.planes * g.gpus
    if kind == "planes":
        return g.planes
    tier = getattr(cfg, "tier", "any")
    return g.planes * ({"t0": g.t0s, "t1": g.spines}.get(tier, g.t0s + g.spines))


def _drawn_component(g: ClosGeometry, kind: str, cfg: FailureKindConfig, i: int) -> Component:
    """The i-th component of `kind` in draw order (0 <= i < population)."""
    if kind in ("links", "degraded"):
        pt, s = divmod(i, g.spines)
        p, t = divmod(pt, g.t0s)
        return _cable(g, p, t, s)
    if kind == "nic_ports":
        p, gpu = divmod(i, g.gpus)
        return _port(g, p, gpu)
    if kind == "planes":
        return _plane(g, i)
    tier = getattr(cfg, "tier", "any")
    if tier == "t0":
        p, t = divmod(i, g.t0s)
        return _switch(g, p, "t0", t)
    if tier == "t1":
        p, s = divmod(i, g.spines)
        return _switch(g, p, "t1", s)
    per_plane = g.t0s + g.spines
    p, j = divmod(i, per_plane)
    return _switch(g, p, "t0", j) if j < g.t0s else _switch(g, p, "t1", j - g.t0s)


def _draw_index(g: ClosGeometry, kind: str, cfg: FailureKindConfig, c: Component) -> int | None:
    """The draw-order index of an explicitly named component, the inverse of
    `_drawn_component` (None when random draws of this kind could not pick it: a host cable
    named under `links`, or a switch outside the drawn `tier`)."""
    if kind in ("links", "degraded"):
        m = _CABLE_UP.match(c.name)
        if not m:
            return None
        p, t, s = (int(x) for x in m.groups())
        return (p * g.t0s + t) * g.spines + s
    if kind == "nic_ports":
        m = _PORT.match(c.name)
        return int(m.group(1)) * g.gpus + int(m.group(2))
    if kind == "planes":
        return int(_PLANE.match(c.name).group(1))
    m = _SWITCH.match(c.name)
    p, switch_tier, index = int(m.group(1)), m.group(2), int(m.group(3))
    tier = getattr(cfg, "tier", "any")
    if tier == "any":
        return p * (g.t0s + g.spines) + (index if switch_tier == "t0" else g.t0s + index)
    if tier != switch_tier:
        return None
    return p * (g.t0s if tier == "t0" else g.spines) + index


def check_failures(scenario: Scenario) -> None:
    """Raise a ScenarioError for names that are not components of the fabric, random counts
    larger than what there is to draw, or several identical sets."""
    cfg = scenario.failures
    g = clos_geometry(scenario.fabric)
    for kind, kind_cfg in cfg.kinds.items():
        names = [parse_component(g, kind, name, f"failures.{kind}.names[{i}]")
                 for i, name in enumerate(kind_cfg.names)]
        available = population(g, kind, kind_cfg)
        named_drawable = sum(_draw_index(g, kind, kind_cfg, c) is not None
                             for c in dict.fromkeys(names)) if kind_cfg.drawn else 0
        if kind_cfg.random > available - named_drawable:
            raise ScenarioError(
                f"failures.{kind}.random",
                f"{kind_cfg.random} exceeds the {available - named_drawable:,} components "
                f"there are to draw; allowed: 0..{available - named_drawable:,}")
    if (cfg.samples or 1) > 1 and not any(k.drawn for k in cfg.kinds.values()):
        raise ScenarioError("failures.samples",
                            f"{cfg.samples} sets would all be the same (nothing is random); "
                            "allowed: 1, or add a `random` count or a `probability`")


# --------------------------------------------------------------------------- batches

class FailureBatch(NamedTuple):
    """B failure sets as padded id lists (host numpy; one device transfer per chunk).

    names: per set, the failed components' names (degraded ones as name@factor).
    dead_links: int32[B, M] directed link ids, padded with the sentinel L.
    dead_nodes: int32[B, Mn] switch node ids, padded with num_nodes (a node with no links).
    degraded_links: int32[B, Md], padded with L; degraded_factor: float32[B, Md], padded 1."""

    names: list
    dead_links: np.ndarray
    dead_nodes: np.ndarray
    degraded_links: np.ndarray
    degraded_factor: np.ndarray

    @property
    def size(self) -> int:
        return int(self.dead_links.shape[0])

    def take(self, start: int, stop: int, pad_to: int) -> tuple[np.ndarray, ...]:
        """Arrays of sets start..stop, padded to `pad_to` sets by repeating the last one (a
        chunk always has the same shape, so it never recompiles)."""
        index = np.minimum(np.arange(start, start + pad_to), stop - 1)
        return (self.dead_links[index], self.dead_nodes[index], self.degraded_links[index],
                self.degraded_factor[index])


def _bucket(n: int) -> int:
    """Padded list length: the next power of two, at least 8 (stable shapes across runs)."""
    return max(8, 1 << max(0, int(n) - 1).bit_length())


def _pad(rows: list[list], fill, dtype) -> np.ndarray:
    width = _bucket(max((len(r) for r in rows), default=0))
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):  # one row per failure set (host-side, small)
        out[i, :len(r)] = r
    return out


def sample_failures(scenario: Scenario, samples: int | None = None) -> FailureBatch:
    """Draw the scenario's failure sets: explicit names in every set, plus per set `random`
    components of each kind drawn without replacement among the rest, plus each remaining one
    with `probability`. Deterministic given `failures.seed` (default: the scenario seed)."""
    cfg: FailuresConfig = scenario.failures
    g = clos_geometry(scenario.fabric)
    count = samples if samples is not None else cfg.num_samples
    seed = scenario.seed if cfg.seed is None else cfg.seed
    rng = np.random.default_rng([seed, 0xFA11])
    per_set: list[list[tuple[Component, float | None]]] = [[] for _ in range(count)]
    for kind, kind_cfg in cfg.kinds.items():
        factor = getattr(kind_cfg, "factor", None)
        named = list(dict.fromkeys(parse_component(g, kind, n, f"failures.{kind}.names")
                                   for n in kind_cfg.names))
        for components in per_set:
            components.extend((c, factor) for c in named)
        if not kind_cfg.drawn:
            continue
        n = population(g, kind, kind_cfg)
        exclude = {i for c in named if (i := _draw_index(g, kind, kind_cfg, c)) is not None}
        rest = n - len(exclude)
        extra = (rng.binomial(rest - kind_cfg.random, kind_cfg.probability, size=count)
                 if kind_cfg.probability > 0 else np.zeros(count, dtype=np.int64))
        for b in range(count):  # one draw per failure set
            k = kind_cfg.random + int(extra[b])
            chosen = rng.choice(n, size=min(n, k + len(exclude)), replace=False)
            chosen = [int(i) for i in chosen if int(i) not in exclude][:k]
            per_set[b].extend((_drawn_component(g, kind, kind_cfg, i), factor)
                              for i in sorted(chosen))
    names, dead, nodes, deg, deg_f = [], [], [], [], []
    for components in per_set:
        names.append([c.name if f is None else f"{c.name}@{f:g}" for c, f in components])
        dead.append([l for c, f in components if f is None for l in c.links])
        nodes.append([v for c, f in components if f is None for v in c.nodes])
        deg.append([l for c, f in components if f is not None for l in c.links])
        deg_f.append([f for c, f in components if f is not None for _ in c.links])
    return FailureBatch(
        names=names,
        dead_links=_pad(dead, g.sentinel, np.int32),
        dead_nodes=_pad(nodes, g.num_nodes, np.int32),
        degraded_links=_pad(deg, g.sentinel, np.int32),
        degraded_factor=_pad(deg_f, 1.0, np.float32),
    )


def batch_from_components(g: ClosGeometry, sets: list[list[Component]]) -> FailureBatch:
    """A FailureBatch from explicit component lists (tests and scripted what-ifs)."""
    return FailureBatch(
        names=[[c.name for c in cs] for cs in sets],
        dead_links=_pad([[l for c in cs for l in c.links] for cs in sets], g.sentinel, np.int32),
        dead_nodes=_pad([[v for c in cs for v in c.nodes] for cs in sets], g.num_nodes,
                        np.int32),
        degraded_links=_pad([[] for _ in sets], g.sentinel, np.int32),
        degraded_factor=_pad([[] for _ in sets], 1.0, np.float32),
    )


def alive_mask_host(g: ClosGeometry, link_src: np.ndarray, link_dst: np.ndarray,
                    dead_links: np.ndarray, dead_nodes: np.ndarray) -> np.ndarray:
    """numpy twin of `failure_mask`'s alive mask for one set (reference and reports)."""
    link_dead = np.zeros(g.num_links + 1, dtype=bool)
    link_dead[dead_links] = True
    node_dead = np.zeros(g.num_nodes + 1, dtype=bool)
    node_dead[dead_nodes] = True
    return ~link_dead[:-1] & ~node_dead[link_src] & ~node_dead[link_dst]


# --------------------------------------------------------------------------- device side

def failure_mask(link_src, link_dst, capacity, dead_links, dead_nodes, degraded_links,
                 degraded_factor, *, num_nodes: int):
    """(alive bool[L], capacity float[L]) of one failure set: a link is dead when it is listed
    or either of its switches is; a degraded link keeps the smallest listed factor."""
    num_links = capacity.shape[0]
    link_dead = jnp.zeros(num_links + 1, bool).at[dead_links].set(True)[:num_links]
    node_dead = jnp.zeros(num_nodes + 1, bool).at[dead_nodes].set(True)
    alive = ~link_dead & ~node_dead[link_src] & ~node_dead[link_dst]
    scale = jnp.ones(num_links + 1, capacity.dtype).at[degraded_links].min(degraded_factor)
    return alive, capacity * scale[:num_links]


def rehash_dead_slots(geom: ClosGeometry, src, dst, plane, spine, alive_ext, key):
    """ECMP after reconvergence with resilient hashing: a queue pair whose (cross-T0) path has
    a dead fabric link moves to a live spine of its plane, uniform over the live ones (the
    first live one of REHASH_DRAWS hashed candidates); the others keep their spine. A QP
    behind a dead NIC port stays dead (no spine can carry it); its flow's other planes carry
    its bytes."""
    src_t0 = geom.t0_of(src)[:, None]
    dst_t0 = geom.t0_of(dst)[:, None]
    cross = src_t0 != dst_t0
    ok = fabric_hops_alive(geom, plane, src_t0, dst_t0, spine, alive_ext)
    candidates = jax.random.randint(key, spine.shape + (REHASH_DRAWS,), 0, geom.spines)
    live = fabric_hops_alive(geom, plane[..., None], src_t0[..., None], dst_t0[..., None],
                             candidates, alive_ext)
    target = jnp.take_along_axis(candidates, jnp.argmax(live, axis=-1)[..., None], axis=-1)
    move = cross & ~ok & jnp.any(live, axis=-1)
    return jnp.where(move, target[..., 0], spine).astype(spine.dtype)


class SetOutcome(NamedTuple):
    """One phase under one policy and one failure set (a leading [B] axis when batched)."""

    stats: jax.Array          # float[1 + tiers, 1] utilisation P100 (alive links), all links
                              # then per tier: what failure records report
    top_links: jax.Array      # int32[top_k]
    top_util: jax.Array       # float[top_k]
    phase_time: jax.Array     # float: slowest flow that still has a path (s)
    ideal_time: jax.Array     # float
    stalled: jax.Array        # int32: flows with bytes and no live path (rate 0)
    stalled_flows: jax.Array  # int32[STALLED_SHOWN]: their indices, -1 padded
    min_rate: jax.Array       # float: slowest non-stalled sending flow (Gbit/s)
    rounds: jax.Array         # int32 max-min rounds
    status: jax.Array         # int32 solver.STATUS_* flags
    affected: jax.Array       # int32: flows with bytes on a pre-failure path that died
    iterations: jax.Array     # int32: mrc / optimal iterations (0 for the others)
    adapt_status: jax.Array   # int32: mrc.MRC_* or optimal status (0 for the others)
    residual: jax.Array       # float: mrc overload / optimal gap (0 for the others)


def _affected(geom, src, dst, plane, spine, alive_ext, sending):
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine, xp=jnp)
    hit = jnp.any(~jnp.all(alive_ext[links], axis=-1), axis=1)
    return jnp.sum(sending & hit).astype(jnp.int32)


def _one_set(policy: str, geom: ClosGeometry, common: dict, extra: dict, item, *,
             tier_bounds, top_k, max_iters, patience, slowest_only) -> SetOutcome:
    src, dst, demand = common["src"], common["dst"], common["demand"]
    size, flow_cap = common["size"], common["flow_cap"]
    alive, capacity = failure_mask(common["link_src"], common["link_dst"], common["capacity"],
                                   *item, num_nodes=geom.num_nodes)
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    sending = size > 0
    zero_i, zero_f = jnp.int32(0), jnp.float32(0.0)
    iterations, adapt_status, residual = zero_i, zero_i, zero_f
    if policy == "optimal":
        from fabricjax.optimal import expand_weights, solve_commodities

        sol = solve_commodities(geom, src, dst, demand, extra["flow_commodity"],
                                extra["comm_src"], extra["comm_dst"], capacity, alive,
                                extra["max_iters"], extra["tol"])
        weights = expand_weights(geom, sol.split, extra["flow_commodity"], sol.flow_live)
        plane, spine = extra["plane"], extra["spine"]
        flow_cap = flow_cap * jnp.minimum(weights.sum(axis=1), 1.0)
        affected = zero_i
        iterations, adapt_status, residual = sol.iterations, sol.status, sol.upper - sol.lower
    else:
        plane, spine = extra["plane"], extra["spine"]
        affected = _affected(geom, src, dst, plane, spine, alive_ext, sending)
        if policy == "ecmp":
            spine = rehash_dead_slots(geom, src, dst, plane, spine, alive_ext,
                                      jax.random.wrap_key_data(extra["key"]))
        elif policy == "mrc":
            from fabricjax.mrc import mrc_fixed_point

            mrc = mrc_fixed_point(geom, src, dst, plane, spine, demand, capacity, alive,
                                  jax.random.wrap_key_data(extra["key"]), extra["threshold"],
                                  extra["damping"],
                                  extra["tol"], max_iters=max_iters, patience=patience)
            spine = mrc.spine
            iterations, adapt_status, residual = mrc.iterations, mrc.status, mrc.residual
        weights = None
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine, xp=jnp)
    if weights is None:
        weights = uniform_live_split(links, alive_ext)
    ids, coef = clos_incidence(geom, src, dst, plane, links, weights)
    result = evaluate_split(ids, coef, demand, size, flow_cap, capacity, alive,
                            eps=common["eps"], max_rounds=common["max_rounds"],
                            tier_bounds=tier_bounds, top_k=top_k, slowest_only=slowest_only,
                            p100_only=True)
    stalled_mask = sending & (result.rates <= 0)
    (stalled_flows,) = jnp.nonzero(stalled_mask, size=STALLED_SHOWN, fill_value=-1)
    min_rate = jnp.min(jnp.where(sending & ~stalled_mask, result.rates, jnp.inf))
    return SetOutcome(
        stats=result.stats, top_links=result.top_links, top_util=result.top_util,
        phase_time=result.phase_time, ideal_time=result.ideal_time, stalled=result.stalled,
        stalled_flows=stalled_flows.astype(jnp.int32),
        min_rate=jnp.where(jnp.isfinite(min_rate), min_rate, 0.0), rounds=result.rounds,
        status=result.status, affected=affected, iterations=jnp.asarray(iterations, jnp.int32),
        adapt_status=jnp.asarray(adapt_status, jnp.int32),
        residual=jnp.asarray(residual, jnp.float32))


@functools.partial(jax.jit, static_argnums=(0, 1),
                   static_argnames=("tier_bounds", "top_k", "max_iters", "patience",
                                    "slowest_only", "vmap_width", "mesh"))
def solve_failure_chunk(policy: str, geom: ClosGeometry, common: dict, extra: dict, chunk, *,
                        tier_bounds, top_k, max_iters=1, patience=1, slowest_only=False,
                        vmap_width=1, mesh=None) -> SetOutcome:
    """`policy`'s steady state and transient exposure for every failure set of `chunk`
    (dead_links, dead_nodes, degraded_links, degraded_factor, each with a leading [C] axis) in
    one call: `vmap_width` sets at a time are vmapped, the groups run one after another
    (`lax.map`), so memory stays bounded while a chunk amortises the dispatch.
    `common`: src, dst, demand, size, flow_cap, capacity, link_src, link_dst, eps, max_rounds;
    `extra`: the policy's pre-failure slots (plane, spine) and options (PRNG keys as raw key
    data). `slowest_only`: the flows all send the same bytes, so the phase time needs only the
    slowest rate (exact).

    `mesh` (a one-axis "sets" mesh, `devices.device_mesh`) shards the chunk's sets over its
    devices (`shard_map`; C must be a multiple of the mesh size): each device runs the same
    per-set program on its share, `common` and `extra` are replicated, and no device talks to
    another, so a set's outcome does not depend on the device count."""
    def run(common, extra, sets):
        one = functools.partial(_one_set, policy, geom, common, extra, tier_bounds=tier_bounds,
                                top_k=top_k, max_iters=max_iters, patience=patience,
                                slowest_only=slowest_only)
        if vmap_width <= 1:
            return jax.lax.map(one, sets)
        return jax.lax.map(one, sets, batch_size=vmap_width)

    if mesh is None:
        return run(common, extra, chunk)
    from jax.sharding import PartitionSpec

    sharded = jax.shard_map(run, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(),
                                                      PartitionSpec("sets")),
                            out_specs=PartitionSpec("sets"), check_vma=False)
    return sharded(common, extra, chunk)


def bytes_per_set(policy: str, geom: ClosGeometry, num_flows: int, slots: int) -> int:
    """A rough upper estimate of the device memory one failure set needs inside a vmapped
    chunk (the max-min solve's [F, E] entry arrays dominate; mrc adds its [F, K, 8] candidate
    draws; optimal its [F, P*S] slot grid)."""
    entries = num_flows * (2 * slots + 2 * geom.planes)
    per = 4 * (12 * (geom.num_links + 1) + 16 * entries)
    if policy == "mrc":
        per += 4 * num_flows * slots * 24
    if policy == "ecmp":
        per += 4 * num_flows * slots * REHASH_DRAWS * 3
    return int(per)


CPU_SETS_PER_CALL = 16   # failure sets per device call on a CPU (progress granularity)
MAX_VMAP_WIDTH = 256


def vmap_width(policy: str, geom: ClosGeometry, num_flows: int, slots: int,
               samples: int) -> int:
    """Failure sets evaluated together (vmapped) inside one device call: 1 on a CPU, else what
    fits in a quarter of the accelerator's memory, at most MAX_VMAP_WIDTH.

    On a CPU vmapping does not pay (measured on 2 cores: 4 or 16 spray sets vmapped were
    1.3-1.5x slower per set than one at a time) and it costs bit-reproducibility: XLA reduces a
    batched array in another order, and the optimal bound's commodity solve then differs in
    the last float32 bit. One set at a time keeps every chunk size byte-identical."""
    from fabricjax.devices import current_device

    device = current_device()
    if device.platform == "cpu":
        return 1
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit", 16 * 2**30)
    except Exception:  # noqa: BLE001 - a backend without memory statistics: assume 16 GiB
        limit = 16 * 2**30
    fit = max(1, int(limit // 4 // max(bytes_per_set(policy, geom, num_flows, slots), 1)))
    return max(1, min(MAX_VMAP_WIDTH, fit, samples))


def sets_per_call(width: int, samples: int, configured: int | None = None,
                  num_devices: int = 1) -> int:
    """Failure sets per device call: `failures.chunk` when given, else CPU_SETS_PER_CALL or
    one vmapped group per device, whichever is larger; rounded up to a multiple of the vmap
    width times the devices the call is sharded over."""
    group = width * max(num_devices, 1)
    wanted = configured if configured is not None else max(group, CPU_SETS_PER_CALL)
    wanted = min(wanted, samples)
    return group * max(1, -(-wanted // group))
