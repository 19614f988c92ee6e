"""What `fabricjax topo` prints: the fabric's counts and its bill of materials beside the
baselines (rich tables; no JAX). Switch counts are as built: below full size a Clos's spines
are as many as their ports need (`fabric.spec.bundled_switches`), and the table says how
many logical spines, one per T0 uplink, the analysis models instead."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from fabricjax.fabric.bom import ratio_text


def topo_table(summary: dict) -> Table:
    """The counts of a two-tier Clos (`fabric.clos.fabric_summary`), switches as built."""
    planes, spines = summary["planes"], summary["t1_per_plane"]
    t1_row = f"{spines:,} per plane, {planes * spines:,} total"
    bundle_row = []
    if spines < summary["t1_per_plane_analysed"]:
        t1_row += " (as built)"
        bundle_row = [("T0-T1 cables per pair", f"{summary['cables_per_t0_t1_pair']} "
                       f"(analysed: {summary['t1_per_plane_analysed']:,} T1s per plane, "
                       "1 cable each)")]
    table = Table(title="Fabric", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("GPUs", f"{summary['gpus']:,}"),
        ("planes × port", f"{summary['planes']} × {summary['port_gbps']:g} Gbit/s "
                          f"(NIC {summary['nic_gbps']:g} Gbit/s)"),
        ("switch radix", str(summary["radix"])),
        ("T0 ports down : up", f"{summary['t0_down_ports']} : {summary['t0_up_ports']}"),
        ("T0 switches", f"{summary['t0_per_plane']:,} per plane, {summary['switches_t0']:,} total"),
        ("T1 switches", t1_row),
        *bundle_row,
        ("switches", f"{summary['switches']:,}"),
        ("links (directed)", f"{summary['links_directed']:,}"),
        ("cables (host + fabric)",
         f"{summary['cables']:,} ({summary['host_cables']:,} + {summary['fabric_cables']:,})"),
        ("paths per GPU pair", f"{summary['paths_cross_t0']:,} across T0s, "
                               f"{summary['paths_same_t0']} under one T0"),
        ("bisection bandwidth", f"{summary['bisection_gbps'] / 1000:,.1f} Tbit/s "
                                f"({'full' if summary['full_bisection'] else 'oversubscribed'})"),
        ("two-tier reach at this radix", f"{summary['max_gpus_two_tiers']:,} GPUs"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def bom_table(designs: list[dict]) -> Table:
    """Bill of materials of the scenario's fabric (first row) and its baselines."""
    table = Table(title="Bill of materials (optics: pluggable modules, both ends of every "
                  "optical link; power without servers)", title_justify="left")
    for column in ("design", "NIC ports, switch", "tiers", "GPUs", "switches", "links",
                   "optics", "kW switches", "kW optics", "kW", "W per GPU"):
        table.add_column(column, justify="left" if column in ("design", "NIC ports, switch")
                         else "right")
    for b in designs:
        table.add_row(escape(b["design"]), _ports(b), str(b["tiers"]), f"{b['gpus']:,}",
                      f"{b['switches']:,}", f"{b['links']:,}", f"{b['modules']:,}",
                      f"{b['watts_switches'] / 1e3:,.0f}", f"{b['watts_optics'] / 1e3:,.0f}",
                      f"{b['watts'] / 1e3:,.0f}", f"{b['watts'] / b['gpus']:,.1f}")
    return table


def _ports(b: dict) -> str:
    return f"{b['planes']} × {b['port_gbps']:g}G, radix {b['radix']}"


def _ports_and_split(b: dict) -> str:
    down, up = b.get("t0_down_up", (1, 1))
    return _ports(b) + ("" if down == up else f", {ratio_text(down, up)} at T0")


def bom_lines(designs: list[dict], note: str | None = None) -> list[str]:
    """The comparison in words: the first design against each baseline, in total and per
    GPU (the fair figure when a baseline serves fewer GPUs), then `note` (why there is no
    baseline, or how it differs) as a line of its own."""
    lines = []
    first = designs[0]
    for other in designs[1:]:
        per = {k: (first[k] / first["gpus"]) / (other[k] / other["gpus"])
               for k in ("switches", "modules", "watts")}
        lines.append(
            f"{_ports_and_split(first)} ({first['tiers']} tiers) against "
            f"{_ports_and_split(other)} ({other['tiers']} tiers, {other['gpus']:,} GPUs), "
            f"per GPU: {per['switches']:.2f}x the switches, {per['modules']:.2f}x the optics, "
            f"{per['watts']:.2f}x the power")
    for b in designs:
        if b.get("below_full_size"):
            lines.append(f"below full size, {_ports_and_split(b)} ({b['tiers']} tiers): "
                         f"{b['below_full_size']}")
    if note:
        lines.append(f"single-plane baseline: {note}")
    return lines


def graph_topo_table(summary: dict, kind: str) -> Table:
    """The counts of a fat tree or graph fabric (`fabric.build.summary`)."""
    table = Table(title=f"Fabric ({kind})", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for name, value in (("GPUs", f"{summary['gpus']:,}"),
                        ("switches", f"{summary['switches']:,}"),
                        ("cables (host + switch)", f"{summary['cables']:,} "
                         f"({summary['host_cables']:,} + {summary['fabric_cables']:,})"),
                        ("switch ports used", f"{summary['switch_radix_min']} .. "
                         f"{summary['switch_radix_max']}"),
                        ("NIC", f"{summary['nic_gbps_max']:g} Gbit/s"),
                        ("paths per GPU pair (K)", f"{summary['paths_per_pair']:,} (largest "
                         f"equal-cost set {summary['equal_cost_paths']:,})")):
        table.add_row(name, value)
    if summary.get("bundles"):
        table.add_row("bundled switch pairs", f"{summary['bundles']:,} (up to "
                      f"{summary['bundle_cables_max']} cables; one solver link each)")
    return table
