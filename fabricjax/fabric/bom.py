"""Bill of materials: switches, links, optics and watts of a fabric, in closed form.

Contract: `bom(cfg)` counts the two-tier multi-plane Clos that `build_fabric(cfg)` builds
(exactly: from its `ClosGeometry`), `fat_tree_bom` / `three_tier_fat_tree_bom` count an
L-tier fat tree of radix-k switches (oversubscribed, if at all, at the T0s), and both return
the same plain dict of integers and watts; `baseline_designs` picks the single-plane fabric
a designer would compare a multi-plane one with, or says why there is none. Host-side arithmetic only (no JAX). Every assumption below is a field of
`BomAssumptions`; pass `overrides={"field": value}` to change one.

Counting rules
- A *link* is one point-to-point connection at `port_gbps` (both directions); `fabric_summary`
  calls it a cable. Optical links carry a transceiver at BOTH ends: `transceivers` counts
  optical port-ends (2 per optical link), not modules.
- A *module* is a physical pluggable. One module has `module_lanes` (8) electrical lanes and
  `module_gbps` (800G, OSFP 8 x 100G) of capacity, so it serves
  ``ports_per_module = min(module_lanes, module_gbps // port_gbps)`` ports (1 at >= 800G):
  on a switch one OSFP carries 8 x 100G ports (breakout to 8 far ends); on a GPU's NIC one
  800G OSFP carries all 8 planes of an 8 x 100G NIC (``ceil(planes / ports_per_module)``
  modules per GPU). Modules on switches are rounded up per switch (per tier in a fat tree
  sized below its maximum; exact whenever switches are full or ports_per_module is 1).
  Ports faster than `module_gbps` get one module of their own speed each.
- Host links (NIC <-> T0) use optics by default (`host_links="optics"`): at 800G a passive
  copper cable reaches only ~2 m, and the GPUs that home on one T0 span several racks (a
  512-port T0 at 1:1 serves 256 GPUs: 32 eight-GPU servers, or 3-4 NVL72 racks), so
  deployments use AOC / LPO / DR optics there.
  `host_links="copper"` makes that layer DAC/AEC: no modules, `copper_watts_per_end` each end.

Defaults (approximate, mid-2020s; public datasheets and trade press, override for a quote)
- `switch_watts_51t` = 2000 W: a 51.2 Tbit/s single-ASIC box (Tomahawk 5 / Spectrum-4
  class; 64 x 800G = 128 x 400G = 512 x 100G, all the same box) without optics. Its ASIC
  alone is ~500-900 W; fans, CPU, retimers and power-supply loss bring such 2RU boxes to
  about 1,800-2,200 W (a round assumed figure, not one vendor's datasheet). Other
  capacities scale linearly with radix x port_gbps (~39 W per Tbit/s), a first-order
  assumption; `switch_watts` sets one flat figure per switch instead.
- `optic_watts` per module by its speed: 100G 3.5 W (QSFP28 DR/FR), 200G 6 W, 400G 12 W
  (QSFP-DD / OSFP DR4), 800G 16 W (OSFP 2xDR4 / DR8 with DSP; LPO ~half), 1.6T 28 W
  (~17 pJ/bit).
- `copper_watts_per_end` = 0 W (passive DAC; an AEC draws ~5-12 W per end at 800G).

Closed forms (per plane, h = k/2): two-tier Clos with D = down, U = up ports per T0:
T0s = ceil(N / D), spines S = U at full size (T0s = k), else the fewest whose ports take the
T0s' uplinks, rounded up to a divisor of U (`bundled_switches`: each T0 reaches each spine
by a bundle of U / S cables), links N + T0s * U, reach k * D (k^2/2 at 1:1). Fat tree of L
tiers at 1:1: reach 2 h^L (k^3/4 for L=3), switches (2L-1) h^(L-1) at full size
(5k^2/4 for L=3: k^2/2 T0s, k^2/2 T1s, k^2/4 cores), N links per layer, 2L modules per GPU
at >= 800G ports. Hence at full bisection, per GPU and with the same ASIC
(R ports at port_gbps = k ports at P x port_gbps, R = P k), multi-plane two tiers need
3P/R = 3/k switches and 4 modules where a single-plane L-tier tree needs (2L-1)/k and 2L:
3/5 the switches and 2/3 the optics against three tiers (see `mrc_claim_comparison`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from fabricjax.config import ClosConfig, FabricKind
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.build import build_graph
from fabricjax.fabric.clos import clos_geometry
from fabricjax.fabric.graph import graph_bom
from fabricjax.fabric.spec import bundled_switches

# 51.2 Tbit/s: the switch ASIC generation of both sides of the published comparison.
REFERENCE_SWITCH_GBPS = 51_200.0
SWITCH_WATTS_51T = 2000.0
OPTIC_WATTS = {100.0: 3.5, 200.0: 6.0, 400.0: 12.0, 800.0: 16.0, 1600.0: 28.0}
MODULE_GBPS = 800.0
MODULE_LANES = 8
HOST_LINKS = "optics"
COPPER_WATTS_PER_END = 0.0
# the tallest single-plane tree `baseline_designs` offers: the published comparison needs four
# (131,072 GPUs on 64 x 800G); nobody builds five when a bigger switch exists
MAX_BASELINE_TIERS = 4


@dataclasses.dataclass(frozen=True)
class BomAssumptions:
    """What a BOM assumes beyond the topology (see the module docstring for sources).

    switch_watts_51t: W of a 51.2 Tbit/s switch without optics; others scale linearly with
    radix x port_gbps. switch_watts: W per switch, overriding that scaling (None: scale).
    optic_watts: W per module keyed by module speed in Gbit/s. module_gbps, module_lanes: a
    module's capacity and electrical lanes (800G OSFP: 8 x 100G). host_links: 'optics' or
    'copper' for NIC <-> T0 links. copper_watts_per_end: W per copper cable end."""

    switch_watts_51t: float = SWITCH_WATTS_51T
    switch_watts: float | None = None
    optic_watts: Mapping[float, float] = dataclasses.field(
        default_factory=lambda: dict(OPTIC_WATTS))
    module_gbps: float = MODULE_GBPS
    module_lanes: int = MODULE_LANES
    host_links: Literal["copper", "optics"] = HOST_LINKS
    copper_watts_per_end: float = COPPER_WATTS_PER_END

    def switch_power(self, radix: int, port_gbps: float) -> float:
        if self.switch_watts is not None:
            return float(self.switch_watts)
        return self.switch_watts_51t * radix * port_gbps / REFERENCE_SWITCH_GBPS

    def module_speed(self, port_gbps: float) -> float:
        return max(float(self.module_gbps), float(port_gbps))

    def ports_per_module(self, port_gbps: float) -> int:
        return max(1, min(self.module_lanes, int(self.module_speed(port_gbps) // port_gbps)))

    def module_power(self, port_gbps: float) -> float:
        speed = self.module_speed(port_gbps)
        watts = {float(k): float(v) for k, v in self.optic_watts.items()}
        if speed not in watts:
            known = ", ".join(f"{k:g}" for k in sorted(watts))
            raise ScenarioError("bom.optic_watts", f"no watts for a {speed:g}G module; "
                                f"known speeds: {known} (add {speed:g}: <watts>)")
        return watts[speed]


DEFAULT_ASSUMPTIONS = BomAssumptions()


def assumptions(overrides: Mapping[str, Any] | BomAssumptions | None = None) -> BomAssumptions:
    """Defaults with `overrides` applied; an `optic_watts` override merges into the table."""
    if overrides is None:
        return DEFAULT_ASSUMPTIONS
    if isinstance(overrides, BomAssumptions):
        return overrides
    allowed = [f.name for f in dataclasses.fields(BomAssumptions)]
    for key in overrides:
        if key not in allowed:
            raise ScenarioError(f"bom.{key}", f"unknown field; allowed: "
                                f"{', '.join(allowed)}")
    fields = dict(overrides)
    if "optic_watts" in fields:
        fields["optic_watts"] = {**OPTIC_WATTS, **{float(k): float(v) for k, v in
                                                   fields["optic_watts"].items()}}
    if fields.get("host_links", HOST_LINKS) not in ("copper", "optics"):
        raise ScenarioError("bom.host_links", f"allowed: copper, optics "
                            f"(got {fields['host_links']!r})")
    for key in ("switch_watts_51t", "switch_watts", "copper_watts_per_end"):
        if fields.get(key) is not None and not fields[key] >= 0:
            raise ScenarioError(f"bom.{key}", f"must be >= 0 (got {fields[key]!r})")
    for key in ("module_gbps", "module_lanes"):
        if key in fields and not fields[key] >= 1:
            raise ScenarioError(f"bom.{key}", f"must be >= 1 (got {fields[key]!r})")
    return dataclasses.replace(DEFAULT_ASSUMPTIONS, **fields)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _switch_modules(groups: list[tuple[int, int]], ppm: int) -> int:
    """Modules on switches: `groups` of (switch count, optical ports on each), per switch."""
    return sum(count * _ceil_div(ports, ppm) for count, ports in groups)


def _assemble(*, design: str, gpus: int, gpus_reached: int, planes: int, port_gbps: float,
              radix: int, t0_ports: tuple[int, int], tier_switches: dict[str, int], tier_ports: dict[str, int],
              layer_links: dict[str, int], nic_modules: int,
              layer_switch_modules: dict[str, int], a: BomAssumptions) -> dict:
    """The common BOM dict from per-tier and per-layer counts (all planes together)."""
    host_layer = "host-t0"
    optical = {name: (0 if name == host_layer and a.host_links == "copper" else n)
               for name, n in layer_links.items()}
    modules = dict(layer_switch_modules)
    if a.host_links == "copper":
        modules[host_layer] = 0
        nic_modules = 0
    else:
        modules[host_layer] += nic_modules
    switches = sum(tier_switches.values())
    links = sum(layer_links.values())
    total_modules = sum(modules.values())
    copper_links = links - sum(optical.values())
    watts_switches = switches * a.switch_power(radix, port_gbps)
    module_watts = a.module_power(port_gbps)
    watts_optics = total_modules * module_watts
    watts_copper = 2 * copper_links * a.copper_watts_per_end
    watts = watts_switches + watts_optics + watts_copper
    return {
        "design": design,
        "tiers": len(tier_switches),
        "gpus": gpus,
        "gpus_reached": gpus_reached,
        "planes": planes,
        "port_gbps": float(port_gbps),
        "radix": radix,
        "switch_gbps": float(radix * port_gbps),
        "t0_down_up": list(t0_ports),
        "switches_by_tier": dict(tier_switches),
        "switches_per_plane": {t: n // planes for t, n in tier_switches.items()},
        "switches": switches,
        "switch_ports_used": dict(tier_ports),
        "switch_ports_total": switches * radix,
        "links_by_layer": dict(layer_links),
        "links": links,
        "optical_links": sum(optical.values()),
        "copper_links": copper_links,
        "transceivers_by_layer": {name: 2 * n for name, n in optical.items()},
        "transceivers": 2 * sum(optical.values()),
        "ports_per_module": a.ports_per_module(port_gbps),
        "module_gbps": a.module_speed(port_gbps),
        "modules_by_layer": modules,
        "modules_nic": nic_modules,
        "modules_switch": total_modules - nic_modules,
        "modules": total_modules,
        "watts_per_switch": a.switch_power(radix, port_gbps),
        "watts_per_module": module_watts,
        "watts_switches": watts_switches,
        "watts_optics": watts_optics,
        "watts_copper": watts_copper,
        "watts": watts,
        "per_gpu": {"switches": switches / gpus, "links": links / gpus,
                    "modules": total_modules / gpus, "transceivers": 2 * sum(optical.values())
                    / gpus, "watts": watts / gpus},
        "assumptions": {**dataclasses.asdict(a), "optic_watts": dict(a.optic_watts)},
    }


def t0_ports(radix: int, oversubscription: float = 1.0) -> tuple[int, int]:
    """(down, up) ports of a T0 of `radix` ports split as near as whole ports allow to
    `oversubscription` (down:up): up = round(radix / (1 + ratio)), at least 1."""
    up = max(1, round(radix / (1.0 + oversubscription)))
    return radix - up, up


def ratio_text(down: int, up: int) -> str:
    """A T0 split as a designer says it: 48 down, 16 up is "3:1"."""
    common = math.gcd(down, up)
    return f"{down // common}:{up // common}"


def _ratio_name(down: int, up: int) -> str:
    return "" if down == up else f", {ratio_text(down, up)} at T0"


def bom(fabric_cfg: ClosConfig, *, tiers: int | None = None,
        overrides: Mapping[str, Any] | BomAssumptions | None = None) -> dict:
    """Bill of materials of `fabric_cfg`: the two-tier multi-plane Clos that `build_fabric`
    builds (tiers None or 2), or an L-tier fat tree of the same GPUs, planes, radix, port
    speed and T0 oversubscription (tiers >= 3).

    Two tiers, per plane (N GPUs, D down and U up ports per T0): T0s T = ceil(N/D), spines
    as built S = `bundled_switches(T, U, radix)` (U at full size), each T0 linked to every
    spine by U/S parallel cables; links N (host-t0) + T*U (t0-t1); switch ports used
    N + 2*T*U. Every count is multiplied by the planes P. NIC modules: N * ceil(P /
    ports_per_module). `bundles` gives the cables per T0-spine pair; `below_full_size` says
    how a fabric of fewer than radix T0s per plane is built (None at full size).

    The analysed fabric (`clos.build_fabric`) keeps one logical spine per T0 uplink: the same
    cables and capacity per T0, so loads and link failures read the same; a failed physical
    spine takes U/S of every T0's uplinks where a logical one takes one."""
    a = assumptions(overrides)
    if tiers is not None and tiers != 2:
        return fat_tree_bom(fabric_cfg.gpus, fabric_cfg.radix, fabric_cfg.port_gbps,
                            tiers=tiers, planes=fabric_cfg.planes,
                            oversubscription=fabric_cfg.oversubscription, overrides=a)
    g = clos_geometry(fabric_cfg)
    N, P, D, T, U = g.gpus, g.planes, g.gpus_per_t0, g.t0s, g.spines
    S = bundled_switches(T, U, g.radix)          # spines as built
    ppm = a.ports_per_module(g.port_gbps)
    last = N - (T - 1) * D                       # GPUs under the last (maybe partial) T0
    t0_down = _switch_modules([(T - 1, D), (1, last)], ppm)
    out = _assemble(
        design=f"two-tier {P}-plane Clos" + _ratio_name(D, U), gpus=N,
        gpus_reached=g.radix * D, planes=P, port_gbps=g.port_gbps, radix=g.radix,
        t0_ports=(D, U),
        tier_switches={"t0": P * T, "t1": P * S},
        tier_ports={"t0": P * (N + T * U), "t1": P * T * U},
        layer_links={"host-t0": P * N, "t0-t1": P * T * U},
        nic_modules=N * _ceil_div(P, ppm),
        layer_switch_modules={"host-t0": P * t0_down,
                              "t0-t1": P * _switch_modules([(T, U), (S, T * U // S)], ppm)},
        a=a)
    out["bundles"] = {"t0-t1": U // S}
    out["below_full_size"] = None if T == g.radix else (
        f"{T} of {g.radix} T0s per plane: {S} T1s per plane (ceil({T} x {U} / {g.radix})"
        f" = {_ceil_div(T * U, g.radix)} for their ports, rounded up to divide {U} uplinks "
        f"evenly), {U // S} cable{'s' if U // S > 1 else ''} per T0-T1 pair")
    return out


def fat_tree_reach(radix: int, tiers: int, oversubscription: float = 1.0) -> int:
    """Hosts per plane of a full L-tier tree of radix-k switches whose T0s have d ports down
    (`t0_ports`) and whose upper tiers are 1:1: k (k/2)^(L-2) T0s of d hosts, 2 (k/2)^(L-1) d
    -- 2 (k/2)^L at 1:1, k d for a two-tier Clos."""
    down, _ = t0_ports(radix, oversubscription)
    return 2 * (radix // 2) ** (tiers - 1) * down


def fat_tree_bom(gpus: int, radix: int, port_gbps: float, *, tiers: int = 3, planes: int = 1,
                 oversubscription: float = 1.0,
                 overrides: Mapping[str, Any] | BomAssumptions | None = None) -> dict:
    """BOM of `planes` identical L-tier fat trees (folded Clos) of radix-k switches, each
    sized to `gpus` hosts (one port per GPU per plane), oversubscribed (if at all) at the T0s
    only, as a designer would: d ports down and u up per T0 (`t0_ports`), 1:1 above.

    Per plane, h = k/2: every switch above T0 and below the top has h ports down and h up. A
    tier-i block (1 <= i <= L-2) serves h^i T0s with u h^(i-1) switches (a pod: h T0s, each
    linked once to each of its u T1s); T0s = ceil(G/d), tier i = ceil(T0s / h^i) blocks. A
    partial last pod of t T0s has `bundled_switches(t, u, h)` T1s, each T0 joined to each
    by a bundle of equal cables (T1 m of it taking the uplinks of positions m*b..m*b+b-1).
    The top tier has u h^(L-3) groups (one per switch position in a tier L-2 block), each of
    ceil(B/2) switches for B = ceil(T0s / h^(L-2)) blocks, since a group takes h links from
    each block and a top switch has k down. Full size at 1:1 (G = 2 h^L = k^3/4 at L=3): top
    h^(L-1) = (k/2)^2 core switches, 2 h^(L-1) per lower tier. Below full size the top tier
    is the fewest switches whose ports take every uplink; wired round robin, that is full
    bisection above the T0s when ceil(B/2) divides h (always at full size; checked at 3
    tiers by max-flow in the tests), else within a few links of it.
    Links: G host links; every switch-to-switch layer carries T0s * u links (each tier
    forwards up what enters from below). Switch-side modules: per T0 for the
    host layer, ceil(ports / ports_per_module) per tier side above it."""
    a = assumptions(overrides)
    if radix < 4 or radix % 2:
        raise ScenarioError("radix", f"must be even and >= 4 (got {radix})")
    if tiers < 3:
        raise ScenarioError("tiers", f"fat_tree_bom counts 3 or more tiers; use bom() for two "
                            f"(got {tiers})")
    if gpus < 2:
        raise ScenarioError("gpus", f"must be >= 2 (got {gpus})")
    down, uplinks = t0_ports(radix, oversubscription)
    reach = fat_tree_reach(radix, tiers, oversubscription)
    if gpus > reach:
        raise ScenarioError("gpus", f"{gpus} GPUs exceed what {tiers} tiers of radix {radix} "
                            f"reach (2 x {radix // 2}^{tiers - 1} x {down} = {reach}); use "
                            f"more tiers, a higher radix or more planes")
    h = radix // 2
    t0s = _ceil_div(gpus, down)
    pods, last_pod = _ceil_div(t0s, h), t0s - (_ceil_div(t0s, h) - 1) * h
    # a partial last pod gets the T1s its T0s' uplinks need, in equal bundles
    last_t1s = bundled_switches(last_pod, uplinks, h)
    counts = [t0s, (pods - 1) * uplinks + last_t1s]
    counts += [_ceil_div(t0s, h ** i) * uplinks * h ** (i - 1) for i in range(2, tiers - 1)]
    counts.append(uplinks * h ** (tiers - 3) * _ceil_div(_ceil_div(t0s, h ** (tiers - 2)), 2))
    names = [f"t{i}" for i in range(tiers)]
    layers = ["host-t0"] + [f"t{i}-t{i + 1}" for i in range(tiers - 1)]
    up = t0s * uplinks
    ppm = a.ports_per_module(port_gbps)
    last = gpus - (t0s - 1) * down
    switch_modules = {"host-t0": planes * _switch_modules([(t0s - 1, down), (1, last)], ppm)}
    for layer in layers[1:]:
        # both ends of a switch-to-switch layer, rounded up per tier side
        switch_modules[layer] = planes * 2 * _ceil_div(up, ppm)
    ports = {"t0": planes * (gpus + up)}
    ports.update({name: planes * 2 * up for name in names[1:-1]})
    ports[names[-1]] = planes * up
    out = _assemble(
        design=f"{tiers}-tier {planes}-plane fat tree" + _ratio_name(down, uplinks),
        gpus=gpus, gpus_reached=reach, planes=planes, port_gbps=port_gbps, radix=radix,
        t0_ports=(down, uplinks),
        tier_switches={n: planes * c for n, c in zip(names, counts)},
        tier_ports=ports,
        layer_links={"host-t0": planes * gpus, **{layer: planes * up for layer in layers[1:]}},
        nic_modules=gpus * _ceil_div(planes, ppm),
        layer_switch_modules=switch_modules, a=a)
    out["bundles"] = {"t0-t1": uplinks // last_t1s}
    out["below_full_size"] = None if gpus == reach else (
        f"{gpus:,} of {reach:,} GPUs per plane: the top tier "
        + ("" if last_pod == h else "and the partial last pod ")
        + "as many switches as their ports need"
        + ("" if last_t1s == uplinks else f" (the last pod's {last_t1s} T1s, "
                                          f"{uplinks // last_t1s} cables per T0-T1 pair)"))
    return out


def three_tier_fat_tree_bom(gpus: int, radix: int, port_gbps: float, planes: int = 1, *,
                            overrides: Mapping[str, Any] | BomAssumptions | None = None) -> dict:
    """BOM of a 3-tier (pod-based) fat tree of radix-k switches, per plane: T0 and T1 have
    k/2 ports down and k/2 up; a pod is k/2 T0s and k/2 T1s serving k^2/4 hosts; the core is
    (k/2)^2 switches at full size, reach k^3/4 hosts. Sized to G: T0s = ceil(2G/k), whole
    pods = ceil(4G/k^2) of k/2 T1s, cores = k/2 * ceil(pods/2). See `fat_tree_bom`."""
    return fat_tree_bom(gpus, radix, port_gbps, tiers=3, planes=planes, overrides=overrides)


def tiers_needed(gpus: int, radix: int, oversubscription: float = 1.0) -> int:
    """Fewest tiers of radix-k switches (T0s split by `oversubscription`, 1:1 above) that
    reach `gpus` per plane: at 1:1, 2 up to k^2/2, 3 up to k^3/4, L up to 2 (k/2)^L."""
    tiers = 2
    while fat_tree_reach(radix, tiers, oversubscription) < gpus:
        tiers += 1
    return tiers


def smallest_fabric(gpus: int, radix: int, port_gbps: float, planes: int = 1, *,
                    oversubscription: float = 1.0,
                    overrides: Mapping[str, Any] | BomAssumptions | None = None
                    ) -> tuple[int, dict]:
    """(tiers, BOM) of the smallest fabric for `gpus` at `oversubscription` (at the T0s):
    the two-tier Clos of `bom` when two tiers reach them, else the fat tree of
    `tiers_needed` tiers."""
    tiers = tiers_needed(gpus, radix, oversubscription)
    if tiers == 2:
        down, up = t0_ports(radix, oversubscription)
        cfg = ClosConfig(gpus=gpus, planes=planes, port_gbps=float(port_gbps), radix=radix,
                         oversubscription=down / up)
        return 2, bom(cfg, overrides=overrides)
    return tiers, fat_tree_bom(gpus, radix, port_gbps, tiers=tiers, planes=planes,
                               oversubscription=oversubscription, overrides=overrides)


RATIO_KEYS = ("switches", "modules", "transceivers", "links", "watts_switches",
              "watts_optics", "watts")


def bom_comparison(cfg_a: ClosConfig | dict, cfg_b: ClosConfig | dict, *,
                   overrides: Mapping[str, Any] | BomAssumptions | None = None) -> dict:
    """Design a against design b: each a `ClosConfig` (costed by `bom`) or a BOM dict.

    `ratio`: a's total / b's total; `ratio_per_gpu`: the same per GPU of each design (equal to
    `ratio` when both serve the same GPUs; the fair figure when b cannot reach a's size).
    `transceivers` and `links` count ports of each design's own speed; optics cost follows
    `modules` (physical pluggables) and `watts_optics`."""
    a = cfg_a if isinstance(cfg_a, dict) else bom(cfg_a, overrides=overrides)
    b = cfg_b if isinstance(cfg_b, dict) else bom(cfg_b, overrides=overrides)
    ratio = {k: a[k] / b[k] if b[k] else math.nan for k in RATIO_KEYS}
    per_gpu = {k: (a[k] / a["gpus"]) / (b[k] / b["gpus"]) if b[k] else math.nan
               for k in RATIO_KEYS}
    return {"a": a, "b": b, "tiers": (a["tiers"], b["tiers"]), "gpus": (a["gpus"], b["gpus"]),
            "ratio": ratio, "ratio_per_gpu": per_gpu}


def mrc_claim_comparison(gpus: int = 131_072, *, planes: int = 8, asic_gbps: float = 51_200.0,
                         nic_gbps: float = 800.0,
                         overrides: Mapping[str, Any] | BomAssumptions | None = None) -> dict:
    """The published multi-plane claim, recomputed: `planes` x (nic_gbps/planes) on two tiers
    of (asic/port)-port switches against single-plane nic_gbps on the same ASIC.

    Claim (OpenAI et al., MRC via OCP, 2026): eight 100G planes on 512-port switches reach
    131,072 GPUs in two tiers, where 800G single-plane needs three or more, "with 2/3 the
    optics and 3/5 the switches". A 3-tier fat tree of 64 x 800G reaches only 64^3/4 = 65,536
    GPUs, so the ratios hold per GPU against that 3-tier tree at its full size ('three_tier',
    exactly 3/5 and 2/3 with optical host links); one single-plane fabric for all `gpus` needs
    4 tiers ('single_fabric', 3/7 and 1/2)."""
    port = nic_gbps / planes
    multi = bom(ClosConfig(gpus=gpus, planes=planes, port_gbps=port,
                           radix=int(asic_gbps // port)), overrides=overrides)
    k = int(asic_gbps // nic_gbps)
    three = fat_tree_bom(min(gpus, fat_tree_reach(k, 3)), k, nic_gbps, tiers=3,
                         overrides=overrides)
    tiers, single = smallest_fabric(gpus, k, nic_gbps, overrides=overrides)
    return {"three_tier": bom_comparison(multi, three),
            "single_fabric": bom_comparison(multi, single),
            "single_plane_tiers": tiers}


class Baselines(NamedTuple):
    """What `fabricjax topo` costs beside a multi-plane fabric. designs: BOM dicts, the
    single-plane fabric first; note: why there is none, or how a baseline differs from the
    fabric (a nearer port split, ports left over), else None."""

    designs: list[dict]
    note: str | None


def baseline_designs(cfg: ClosConfig, overrides: Mapping[str, Any] | None = None
                     ) -> Baselines:
    """The baseline a designer would build instead of a multi-plane fabric: the same NIC
    bandwidth (planes x port_gbps) on ONE plane, from the same switch ASIC with its ports
    ganged to that speed (radix / planes ports), at the same oversubscription at the T0s,
    sized for the same GPUs (as many tiers as that takes); and, when that takes four tiers,
    also the three-tier tree at its full size (the per-GPU reference of the published
    comparison). None, with the reason in `note`, when no such fabric is sensible: the
    fabric is single-plane already; the ganged port has no optic in the table (a 3.2T
    single-plane NIC); the ganged switch has fewer than 4 ports or an odd count; or the GPUs
    need more than MAX_BASELINE_TIERS tiers of it (1,024 GPUs on 8-port 800G switches: 5)."""
    if cfg.planes == 1:
        return Baselines([], "none: the fabric is single-plane already")
    a = assumptions(overrides)
    port = float(cfg.port_gbps)
    nic = cfg.planes * port
    radix, spare = divmod(cfg.radix, cfg.planes)
    speed = a.module_speed(nic)
    known = sorted(float(k) for k in a.optic_watts)
    if speed not in known:
        return Baselines([], f"none sensible: one {nic:g}G plane needs {nic:g}G switch "
                         f"ports, and bom.optic_watts has no {speed:g}G module (largest "
                         f"{known[-1]:g}G); add one to cost it")
    ganging = (f"ganging the {cfg.radix}-port switch's {port:g}G ports {cfg.planes} at a "
               f"time leaves {radix} ports of {nic:g}G")
    if radix < 4 or radix % 2:
        return Baselines([], f"none sensible: {ganging} (a tree needs an even radix of 4 "
                         f"or more)")
    down, up = t0_ports(cfg.radix, cfg.oversubscription)
    b_down, b_up = t0_ports(radix, down / up)
    tiers = tiers_needed(cfg.gpus, radix, b_down / b_up)
    if tiers > MAX_BASELINE_TIERS:
        return Baselines([], f"none sensible: {ganging}, and {cfg.gpus:,} GPUs need {tiers} "
                         f"tiers of them (a designer stops at {MAX_BASELINE_TIERS}: a bigger "
                         f"switch instead)")
    _, single = smallest_fabric(cfg.gpus, radix, nic, oversubscription=b_down / b_up,
                                overrides=overrides)
    designs = [single]
    if tiers > 3:
        designs.append(fat_tree_bom(fat_tree_reach(radix, 3, b_down / b_up), radix, nic,
                                    tiers=3, oversubscription=b_down / b_up,
                                    overrides=overrides))
    notes = []
    if b_down * up != b_up * down:
        notes.append(f"its T0s split {b_down} down : {b_up} up ("
                     f"{ratio_text(b_down, b_up)}), the nearest whole-port split of {radix} "
                     f"ports to the fabric's {ratio_text(down, up)}")
    if spare:
        notes.append(f"{spare} of each switch's {cfg.radix} ports are left over after "
                     f"ganging them {cfg.planes} at a time")
    return Baselines(designs, "; ".join(notes) or None)


def scenario_bom(scenario) -> dict:
    """The bill of materials of a scenario's fabric, whatever its kind: the multi-plane Clos
    exactly (`bom`), a fat tree in closed form (`fat_tree_bom`), a graph by its switches and
    cables only (no optics or watts: a file says nothing about them)."""
    cfg = scenario.fabric
    overrides = scenario.bom.overrides()
    if cfg.kind == FabricKind.CLOS:
        return bom(cfg, overrides=overrides)
    if cfg.kind == FabricKind.FAT_TREE:
        return fat_tree_bom(cfg.gpus, cfg.radix, float(cfg.port_gbps), tiers=cfg.tiers,
                            planes=cfg.planes, overrides=overrides)
    return {"design": f"graph {cfg.file}", **graph_bom(build_graph(scenario))}
