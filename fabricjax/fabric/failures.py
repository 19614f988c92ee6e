"""Failure sets: what failed, drawn on the host as id lists (the device turns them into masks).

Contract:
  * A failure set is a set of failed *components*: fabric cables (a switch-to-switch cable,
    both directions), NIC ports (one GPU's cable to one switch, both directions), switches
    (every link of the switch), whole planes (every switch of the plane) and degraded cables
    (alive at a fraction of their capacity). `sample_failures` draws `samples` sets from the
    scenario's `failures` section (explicit names, random counts, per-component
    probabilities; seeded) and returns them as a `FailureBatch`: padded id lists, never
    [B, L] masks on the host.
  * Every fabric kind names its components its own way, behind one `Components` interface:
    `ClosComponents` (the report's Clos link names, `plane3/t0-17/up5`, `plane1/gpu17`,
    `plane2/t1-4`, `plane5`; a T1 is a physical switch as built, which below full size takes
    a bundle of every T0's uplinks) and `GraphComponents` (fat trees and graph files: a cable is
    ``a->b`` in either direction, a switch its node name, a NIC port ``gpu3->p0/edge0``, or
    ``gpu3`` / ``plane0/gpu3`` when that names one port, a plane ``plane<p>``).
  * A cable is the unit. Where switches a and b are joined by a bundle of c parallel cables
    (one solver link each way, `GraphFabric.cables`), ``a->b`` names one of its cables
    (``a->b#0``), ``a->b#i`` cable i (0..c-1) and ``a->b*`` the whole bundle; a failed cable
    takes 1/c of the bundle's capacity (a degraded one (1 - factor)/c), a bundle whose every
    cable failed is dead. Random draws are over cables, so a bundle of 8 is 8 times as
    likely to lose one as a single cable.
  * The id lists are padded to power-of-two lengths, so a new failure set of the same size
    reuses the compiled code (`engine.batch` applies them).
"""

from __future__ import annotations

import dataclasses
import re
from typing import NamedTuple

import numpy as np

from fabricjax.config import FabricKind, FailureKindConfig, FailuresConfig, Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.build import AnyFabric, build
from fabricjax.fabric.clos import ClosGeometry, Fabric, clos_geometry
from fabricjax.fabric.graph import GraphFabric

KINDS = ("links", "switches", "nic_ports", "planes", "degraded")
# how the failure study counts components per set, in the report's order
COUNTED_KINDS = ("cable", "nic_port", "switch", "plane", "degraded")

_CABLE_UP = re.compile(r"^plane(\d+)/t0-(\d+)/up(\d+)$")
_CABLE_DOWN = re.compile(r"^plane(\d+)/t1-(\d+)/down(\d+)(?:#(\d+))?$")
_PORT = re.compile(r"^plane(\d+)/gpu(\d+)(?:/(up|down))?$")
_SWITCH = re.compile(r"^plane(\d+)/(t0|t1)-(\d+)$")
_PLANE = re.compile(r"^plane(\d+)$")
_BUNDLE_PART = re.compile(r"^(.+?)(?:#(\d+)|(\*))$")


@dataclasses.dataclass(frozen=True)
class Component:
    """One failed component: its readable name, the directed links it kills (or degrades),
    the switch node ids it kills, and the share of each link's capacity it takes (1: all of
    it; 1/c: one cable of a bundle of c)."""

    name: str
    links: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    fraction: float = 1.0


# --------------------------------------------------------------------------- the Clos

class ClosComponents:
    """Components of a two-tier multi-plane Clos, by arithmetic on its geometry. Draw order:
    cables by (plane, T0, spine), NIC ports by (plane, GPU), switches by plane then T0s then
    T1s (or one tier), planes by index."""

    def __init__(self, geom: ClosGeometry):
        self.g = geom

    @property
    def num_links(self) -> int:
        return self.g.num_links

    @property
    def num_nodes(self) -> int:
        return self.g.num_nodes

    def _cable(self, p: int, t: int, s: int) -> Component:
        g = self.g
        return Component(f"plane{p}/t0-{t}/up{s}",
                         links=(int(g.t0_up(p, t, s)), int(g.t1_down(p, t, s))))

    def _port(self, p: int, gpu: int) -> Component:
        g = self.g
        return Component(f"plane{p}/gpu{gpu}", links=(int(g.gpu_up(p, gpu)),
                                                      int(g.gpu_down(p, gpu))))

    def _t0_node(self, p: int, t: int) -> int:
        return self.g.gpus + p * self.g.t0s + t

    def _t1_node(self, p: int, s: int) -> int:
        return self.g.gpus + self.g.planes * self.g.t0s + p * self.g.spines + s

    def _switch(self, p: int, tier: str, index: int) -> Component:
        """T0 `index`, or physical T1 `index`: the logical spines of its bundle."""
        if tier == "t0":
            nodes = (self._t0_node(p, index),)
        else:
            b = self.g.spine_bundle
            nodes = tuple(self._t1_node(p, index * b + c) for c in range(b))
        return Component(f"plane{p}/{tier}-{index}", nodes=nodes)

    def _plane(self, p: int) -> Component:
        g = self.g
        nodes = ([self._t0_node(p, t) for t in range(g.t0s)] +
                 [self._t1_node(p, s) for s in range(g.spines)])
        return Component(f"plane{p}", nodes=tuple(nodes))

    def kind_of(self, name: str) -> str:
        """The kind (`COUNTED_KINDS`) of a failed component by its name in a set."""
        if "@" in name:
            return "degraded"
        parts = name.split("/")
        if len(parts) == 1:
            return "plane"
        if parts[1].startswith("gpu"):
            return "nic_port"
        return "cable" if len(parts) == 3 else "switch"

    def ranges(self) -> str:
        g = self.g
        bundle = (f" (T0 uplinks up0..up{g.spines - 1}, {g.spine_bundle} cables #0.."
                  f"#{g.spine_bundle - 1} to each T1)" if g.spine_bundle > 1 else "")
        return (f"planes 0..{g.planes - 1}, t0 0..{g.t0s - 1}, t1 0..{g.t1_switches - 1}"
                f"{bundle}, gpu 0..{g.gpus - 1}")

    def parse(self, kind: str, name: str, field: str) -> Component:
        """The component a readable name denotes, for a failure kind; a ScenarioError
        otherwise."""
        g = self.g

        def bad(what: str) -> ScenarioError:
            return ScenarioError(field, f"{name!r} is not {what} of this fabric "
                                        f"({self.ranges()})")

        def check(p: int, **bounds: tuple[int, int]) -> None:
            if not 0 <= p < g.planes or any(not 0 <= v < hi for v, hi in bounds.values()):
                raise bad("a component")

        if not isinstance(name, str):
            raise ScenarioError(field, f"expected a name such as plane0/t0-3/up5, got {name!r}")
        if kind in ("links", "degraded"):
            m = _CABLE_UP.match(name)
            if m:
                p, t, s = (int(x) for x in m.groups())
                check(p, t=(t, g.t0s), s=(s, g.spines))
                return self._cable(p, t, s)
            m = _CABLE_DOWN.match(name)
            if m:       # physical T1 j, its cable c (0 when unsaid) to T0 t
                p, j, t = (int(x) for x in m.groups()[:3])
                c = int(m.group(4) or 0)
                check(p, t=(t, g.t0s), j=(j, g.t1_switches), c=(c, g.spine_bundle))
                return self._cable(p, t, j * g.spine_bundle + c)
            m = _PORT.match(name)
            if m and m.group(3) is not None:       # a host cable by its link name
                p, gpu = int(m.group(1)), int(m.group(2))
                check(p, gpu=(gpu, g.gpus))
                return self._port(p, gpu)
            raise ScenarioError(field, f"{name!r} is not a link name; allowed: "
                                       f"plane<p>/t0-<t>/up<s>, plane<p>/t1-<j>/down<t>"
                                       f"{'#<c>' if g.spine_bundle > 1 else ''}, "
                                       f"plane<p>/gpu<g>/up|down ({self.ranges()})")
        if kind == "nic_ports":
            m = _PORT.match(name)
            if not m:
                raise ScenarioError(field, f"{name!r} is not a NIC port name; allowed: "
                                           f"plane<p>/gpu<g> ({self.ranges()})")
            p, gpu = int(m.group(1)), int(m.group(2))
            check(p, gpu=(gpu, g.gpus))
            return self._port(p, gpu)
        if kind == "switches":
            m = _SWITCH.match(name)
            if not m:
                raise ScenarioError(field, f"{name!r} is not a switch name; allowed: "
                                           f"plane<p>/t0-<t>, plane<p>/t1-<s> ({self.ranges()})")
            p, tier, index = int(m.group(1)), m.group(2), int(m.group(3))
            check(p, i=(index, g.t0s if tier == "t0" else g.t1_switches))
            return self._switch(p, tier, index)
        if kind == "planes":
            m = _PLANE.match(name)
            if not m:
                raise ScenarioError(field, f"{name!r} is not a plane; allowed: plane<p> or <p> "
                                           f"with p in 0..{g.planes - 1}")
            p = int(m.group(1))
            check(p)
            return self._plane(p)
        raise ValueError(kind)  # pragma: no cover

    def population(self, kind: str, cfg: FailureKindConfig) -> int:
        """How many components of `kind` random draws choose from."""
        g = self.g
        if kind in ("links", "degraded"):
            return g.planes * g.t0s * g.spines
        if kind == "nic_ports":
            return g.planes * g.gpus
        if kind == "planes":
            return g.planes
        tier = getattr(cfg, "tier", "any")
        t1s = g.t1_switches
        return g.planes * ({"t0": g.t0s, "t1": t1s}.get(tier, g.t0s + t1s))

    def drawn(self, kind: str, cfg: FailureKindConfig, i: int) -> Component:
        """The i-th component of `kind` in draw order (0 <= i < population)."""
        g = self.g
        if kind in ("links", "degraded"):
            pt, s = divmod(i, g.spines)
            p, t = divmod(pt, g.t0s)
            return self._cable(p, t, s)
        if kind == "nic_ports":
            p, gpu = divmod(i, g.gpus)
            return self._port(p, gpu)
        if kind == "planes":
            return self._plane(i)
        tier = getattr(cfg, "tier", "any")
        if tier == "t0":
            p, t = divmod(i, g.t0s)
            return self._switch(p, "t0", t)
        if tier == "t1":
            p, j = divmod(i, g.t1_switches)
            return self._switch(p, "t1", j)
        per_plane = g.t0s + g.t1_switches
        p, j = divmod(i, per_plane)
        return self._switch(p, "t0", j) if j < g.t0s else self._switch(p, "t1", j - g.t0s)

    def draw_index(self, kind: str, cfg: FailureKindConfig, c: Component) -> int | None:
        """The draw-order index of an explicitly named component, the inverse of `drawn`
        (None when random draws of this kind could not pick it: a host cable named under
        `links`, or a switch outside the drawn `tier`)."""
        g = self.g
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
            return p * (g.t0s + g.t1_switches) + (index if switch_tier == "t0"
                                                  else g.t0s + index)
        if tier != switch_tier:
            return None
        return p * (g.t0s if tier == "t0" else g.t1_switches) + index


# --------------------------------------------------------------------------- graph fabrics

class GraphComponents:
    """Components of a fat tree or graph file. Cables: the switch-to-switch cables in link
    order of their upward link; NIC ports: the host cables in link order; switches: by node
    id, `tier` t0 the switches that hosts attach to, t1 every other; planes: by the switches'
    `plane` attribute."""

    def __init__(self, fabric: GraphFabric):
        self.f = fabric
        (up0, up1), (host0, host1) = fabric.layout_bounds[1], fabric.layout_bounds[0]
        self._up = np.arange(up0, up1)
        # cable i of the switch cables is cable i - start[b] of bundle b (draws are per cable)
        self._cable_start = np.concatenate([[0], np.cumsum(fabric.cables[up0:up1])])
        self._host = np.arange(host0, host1)
        self._switches = np.arange(fabric.gpus, fabric.num_nodes)
        level = fabric.switch_level[self._switches]
        self._by_tier = {"t0": self._switches[level == 1], "t1": self._switches[level >= 2],
                         "any": self._switches}
        self._node = {name: i for i, name in enumerate(fabric.node_names)}
        self._plane_of_node = np.zeros(fabric.num_nodes, np.int64)
        self._plane_of_node[fabric.link_src] = fabric.plane
        self._plane_of_node[:fabric.gpus] = -1

    @property
    def num_links(self) -> int:
        return self.f.num_links

    @property
    def num_nodes(self) -> int:
        return self.f.num_nodes

    def kind_of(self, name: str) -> str:
        """The kind (`COUNTED_KINDS`) of a failed component by its name in a set."""
        if "@" in name:
            return "degraded"
        found = self._named_cable(name)
        if found is not None:
            return "nic_port" if self.f.tier[found[0]] in (0, 3) else "cable"
        return "switch" if name in self._node else "plane"

    def ranges(self) -> str:
        f = self.f
        return (f"{int(self._cable_start[-1]):,} switch cables, {self._host.size:,} host cables, "
                f"{self._switches.size:,} switches, hosts {f.node_names[0]}.."
                f"{f.node_names[f.gpus - 1]}, planes 0..{f.planes - 1}")

    def _cable_of(self, up: int, which: int | str | None = None, field: str = "",
                  name: str = "") -> Component:
        """The cable `which` (an index, None for cable 0, "*" for all) of the bundle whose
        upward link is `up`; a single cable is the whole link, named as before."""
        f = self.f
        down = int(f.link_ids(f.link_dst[up], f.link_src[up]))
        count, base = int(f.cables[up]), f.link_name(up)
        index = 0 if which in (None, "*") else int(which)
        if not 0 <= index < count:
            raise ScenarioError(field, f"{name!r}: {base} is a bundle of {count} cable"
                                f"{'s' if count > 1 else ''}; allowed: {base}#0.."
                                f"{base}#{count - 1}, or {base}* for the whole bundle")
        if count == 1 or which == "*":
            return Component(base + ("*" if count > 1 else ""), links=(int(up), down))
        return Component(f"{base}#{index}", links=(int(up), down), fraction=1.0 / count)

    def _named_cable(self, name: str) -> tuple[int, int | str | None] | None:
        """(link id, which) of ``a->b`` (None), ``a->b#i`` (i) or ``a->b*`` ("*"); None when
        `name` names no link (a node name may itself hold # or *: the plain name wins)."""
        link = self._link(name)
        if link is not None:
            return link, None
        m = _BUNDLE_PART.match(name)
        if m is None:
            return None
        link = self._link(m.group(1))
        if link is None:
            return None
        return link, ("*" if m.group(3) else int(m.group(2)))

    def _link(self, name: str) -> int | None:
        """The link id of ``a->b``, or None."""
        if "->" not in name:
            return None
        a, b = name.split("->", 1)
        if a not in self._node or b not in self._node:
            return None
        link = int(self.f.link_ids(self._node[a], self._node[b]))
        return link if link >= 0 else None

    def _upward(self, link: int) -> int:
        """The cable's representative link: host -> switch for a host cable, the tier-1
        (upward) link for a switch cable."""
        f = self.f
        if f.tier[link] in (1, 0):
            return link
        return int(f.link_ids(f.link_dst[link], f.link_src[link]))

    def _plane(self, p: int) -> Component:
        nodes = self._switches[self._plane_of_node[self._switches] == p]
        return Component(f"plane{p}", nodes=tuple(int(n) for n in nodes))

    def _host_ports(self, host: int) -> np.ndarray:
        return self._host[self.f.link_src[self._host] == host]

    def parse(self, kind: str, name: str, field: str) -> Component:
        f = self.f
        if not isinstance(name, str):
            raise ScenarioError(field, f"expected a component name, got {name!r}")
        if kind in ("links", "degraded", "nic_ports"):
            link, which = self._named_cable(name) or (None, None)
            host_cable = link is not None and f.tier[link] in (0, 3)
            if kind == "nic_ports" and link is None:
                link = self._named_port(name, field)
                host_cable = True
            if link is None or (kind == "nic_ports" and not host_cable):
                what = ("a host cable (host->switch), <host>, or plane<p>/<host>"
                        if kind == "nic_ports" else "a cable a->b between two linked nodes "
                        "(a->b#i: cable i of a bundle, a->b*: the whole bundle)")
                raise ScenarioError(field, f"{name!r} is not {what} of this fabric "
                                    f"({self.ranges()})")
            return self._cable_of(self._upward(link), which, field, name)
        if kind == "switches":
            node = self._node.get(name)
            if node is None or node < f.gpus:
                raise ScenarioError(field, f"{name!r} is not a switch of this fabric; allowed: "
                                    f"a switch's node name ({self.ranges()})")
            return Component(name, nodes=(node,))
        if kind == "planes":
            m = _PLANE.match(name)
            if not m or not 0 <= int(m.group(1)) < f.planes:
                raise ScenarioError(field, f"{name!r} is not a plane; allowed: plane<p> or <p> "
                                    f"with p in 0..{f.planes - 1}")
            return self._plane(int(m.group(1)))
        raise ValueError(kind)  # pragma: no cover

    def _named_port(self, name: str, field: str) -> int | None:
        """The host cable of ``<host>`` (a host with one port) or ``plane<p>/<host>``."""
        plane = None
        host_name = name
        m = re.match(r"^plane(\d+)/(.+)$", name)
        if m:
            plane, host_name = int(m.group(1)), m.group(2)
        host = self._node.get(host_name)
        if host is None or host >= self.f.gpus:
            return None
        ports = self._host_ports(host)
        if plane is not None:
            ports = ports[self.f.plane[ports] == plane]
        if ports.size != 1:
            raise ScenarioError(field, f"{name!r} names {ports.size} ports; allowed: one host "
                                "cable, as host->switch")
        return int(ports[0])

    def population(self, kind: str, cfg: FailureKindConfig) -> int:
        if kind in ("links", "degraded"):
            return int(self._cable_start[-1])
        if kind == "nic_ports":
            return int(self._host.size)
        if kind == "planes":
            return self.f.planes
        return int(self._by_tier[getattr(cfg, "tier", "any")].size)

    def drawn(self, kind: str, cfg: FailureKindConfig, i: int) -> Component:
        if kind in ("links", "degraded"):
            bundle = int(np.searchsorted(self._cable_start, i, side="right")) - 1
            return self._cable_of(int(self._up[bundle]), i - int(self._cable_start[bundle]))
        if kind == "nic_ports":
            return self._cable_of(int(self._host[i]), "*")
        if kind == "planes":
            return self._plane(i)
        node = int(self._by_tier[getattr(cfg, "tier", "any")][i])
        return Component(self.f.node_names[node], nodes=(node,))

    def draw_index(self, kind: str, cfg: FailureKindConfig, c: Component) -> int | None:
        if kind in ("links", "degraded"):
            hit = np.flatnonzero(self._up == c.links[0])
            if not hit.size:
                return None
            start, count = self._cable_start[hit[0]], self.f.cables[c.links[0]]
            if count == 1:
                return int(start)
            if c.fraction >= 1:          # a whole bundle is no single draw
                return None
            return int(start) + int(c.name.rsplit("#", 1)[1])
        elif kind == "nic_ports":
            hit = np.flatnonzero(self._host == c.links[0])
        elif kind == "planes":
            return int(_PLANE.match(c.name).group(1))
        else:
            hit = np.flatnonzero(self._by_tier[getattr(cfg, "tier", "any")] == c.nodes[0])
        return int(hit[0]) if hit.size else None


def components_of(target: ClosGeometry | AnyFabric) -> ClosComponents | GraphComponents:
    """The component namer of a fabric (or of a Clos geometry)."""
    if isinstance(target, GraphFabric):
        return GraphComponents(target)
    if isinstance(target, Fabric):
        return ClosComponents(target.geometry)
    return ClosComponents(target)


def parse_component(target, kind: str, name: str, field: str) -> Component:
    """The component `name` denotes, for a failure kind (`components_of(target).parse`)."""
    return components_of(target).parse(kind, name, field)


def population(target, kind: str, cfg: FailureKindConfig) -> int:
    return components_of(target).population(kind, cfg)


def drawn_component(target, kind: str, cfg: FailureKindConfig, i: int) -> Component:
    return components_of(target).drawn(kind, cfg, i)


def draw_index(target, kind: str, cfg: FailureKindConfig, c: Component) -> int | None:
    return components_of(target).draw_index(kind, cfg, c)


def _components(scenario: Scenario, fabric: AnyFabric | None):
    if fabric is not None:
        return components_of(fabric)
    if scenario.fabric.kind == FabricKind.CLOS:
        return ClosComponents(clos_geometry(scenario.fabric))
    return GraphComponents(build(scenario))


def check_failures(scenario: Scenario, fabric: AnyFabric | None = None) -> None:
    """Raise a ScenarioError for names that are not components of the fabric, random counts
    larger than what there is to draw, or several identical sets."""
    cfg = scenario.failures
    comps = _components(scenario, fabric)
    for kind, kind_cfg in cfg.kinds.items():
        names = [comps.parse(kind, name, f"failures.{kind}.names[{i}]")
                 for i, name in enumerate(kind_cfg.names)]
        available = comps.population(kind, kind_cfg)
        named_drawable = sum(comps.draw_index(kind, kind_cfg, c) is not None
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



def kind_counts(batch: FailureBatch, target) -> dict:
    """{kind: {"p50", "max"}} of the components per set, for kinds that ever failed (kinds
    in `COUNTED_KINDS` order); `target`: the fabric the names belong to."""
    comps = components_of(target)
    per_kind = {k: [] for k in COUNTED_KINDS}
    for names in batch.names:
        kinds = [comps.kind_of(name) for name in names]
        for k in COUNTED_KINDS:
            per_kind[k].append(sum(1 for x in kinds if x == k))
    return {k: {"p50": float(np.median(v)), "max": int(max(v))}
            for k, v in per_kind.items() if v and max(v) > 0}


def _bucket(n: int) -> int:
    """Padded list length: the next power of two, at least 8 (stable shapes across runs)."""
    return max(8, 1 << max(0, int(n) - 1).bit_length())


def _pad(rows: list[list], fill, dtype) -> np.ndarray:
    width = _bucket(max((len(r) for r in rows), default=0))
    out = np.full((len(rows), width), fill, dtype=dtype)
    for i, r in enumerate(rows):  # one row per failure set (host-side, small)
        out[i, :len(r)] = r
    return out


def sample_failures(scenario: Scenario, samples: int | None = None, *,
                    fabric: AnyFabric | None = None) -> FailureBatch:
    """Draw the scenario's failure sets: explicit names in every set, plus per set `random`
    components of each kind drawn without replacement among the rest, plus each remaining one
    with `probability`. Deterministic given `failures.seed` (default: the scenario seed).
    `fabric`: the built fabric (built from the scenario when None)."""
    cfg: FailuresConfig = scenario.failures
    comps = _components(scenario, fabric)
    count = samples if samples is not None else cfg.num_samples
    seed = scenario.seed if cfg.seed is None else cfg.seed
    rng = np.random.default_rng([seed, 0xFA11])
    per_set: list[list[tuple[Component, float | None]]] = [[] for _ in range(count)]
    for kind, kind_cfg in cfg.kinds.items():
        factor = getattr(kind_cfg, "factor", None)
        named = list(dict.fromkeys(comps.parse(kind, n, f"failures.{kind}.names")
                                   for n in kind_cfg.names))
        for components in per_set:
            components.extend((c, factor) for c in named)
        if not kind_cfg.drawn:
            continue
        n = comps.population(kind, kind_cfg)
        exclude = {i for c in named if (i := comps.draw_index(kind, kind_cfg, c)) is not None}
        rest = n - len(exclude)
        extra = (rng.binomial(rest - kind_cfg.random, kind_cfg.probability, size=count)
                 if kind_cfg.probability > 0 else np.zeros(count, dtype=np.int64))
        for b in range(count):  # one draw per failure set
            k = kind_cfg.random + int(extra[b])
            chosen = rng.choice(n, size=min(n, k + len(exclude)), replace=False)
            chosen = [int(i) for i in chosen if int(i) not in exclude][:k]
            per_set[b].extend((comps.drawn(kind, kind_cfg, i), factor) for i in sorted(chosen))
    return _batch(comps, per_set)


def _batch(comps, per_set: list[list[tuple[Component, float | None]]]) -> FailureBatch:
    names, dead, nodes, deg, deg_f = [], [], [], [], []
    for components in per_set:
        names.append([c.name if f is None else f"{c.name}@{f:g}" for c, f in components])
        whole = [(c, f) for c, f in components if c.fraction >= 1]
        dead.append([l for c, f in whole if f is None for l in c.links])
        nodes.append([v for c, f in whole if f is None for v in c.nodes])
        deg.append([l for c, f in whole if f is not None for l in c.links])
        deg_f.append([f for c, f in whole if f is not None for _ in c.links])
        # cables of a bundle: the shares they take add up per link (the device keeps one
        # factor per link, the smallest), and a bundle with every cable gone is dead
        removed: dict[int, float] = {}
        for c, f in components:
            if c.fraction < 1:
                for l in c.links:
                    removed[l] = removed.get(l, 0.0) + c.fraction * (1.0 - (f or 0.0))
        for l, share in removed.items():
            if share >= 1.0 - 1e-9:
                dead[-1].append(l)
            else:
                deg[-1].append(l)
                deg_f[-1].append(1.0 - share)
    return FailureBatch(
        names=names,
        dead_links=_pad(dead, comps.num_links, np.int32),
        dead_nodes=_pad(nodes, comps.num_nodes, np.int32),
        degraded_links=_pad(deg, comps.num_links, np.int32),
        degraded_factor=_pad(deg_f, 1.0, np.float32),
    )


def batch_from_components(target, sets: list[list[Component]]) -> FailureBatch:
    """A FailureBatch from explicit component lists (tests and scripted what-ifs)."""
    return _batch(components_of(target), [[(c, None) for c in cs] for cs in sets])


def alive_mask_host(target, link_src: np.ndarray, link_dst: np.ndarray,
                    dead_links: np.ndarray, dead_nodes: np.ndarray) -> np.ndarray:
    """numpy twin of the device's alive mask for one set (reference and reports); `target`:
    a fabric or a Clos geometry (it gives the link and node counts)."""
    link_dead = np.zeros(target.num_links + 1, dtype=bool)
    link_dead[dead_links] = True
    node_dead = np.zeros(target.num_nodes + 1, dtype=bool)
    node_dead[dead_nodes] = True
    return ~link_dead[:-1] & ~node_dead[link_src] & ~node_dead[link_dst]
