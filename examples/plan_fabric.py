# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Planning a fabric: planes, entropy values and what they cost
#
# A fabric designer's question: for 1,024 GPUs with an 800G NIC each, should the NIC be
# one 800G port or eight 100G planes, and how many entropy values (EVs) must spraying use
# before the tail stops improving? And what does each design cost in switches, optics and
# power?
#
# This notebook answers it with fabricjax's Python API: it compares planes under every
# policy, sweeps the EVs, joins the bill of materials (what `fabricjax topo` prints) with a
# price table of your own, and plots the trade-off. It is a plain Python file in jupytext's
# percent format: open it in Jupyter with jupytext, or run it as a script
# (`python examples/plan_fabric.py`). `FABRICJAX_EXAMPLE_SMALL=1` runs it on a 128-GPU
# fabric in a minute or two, as the test suite does.

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

import fabricjax as fj
from fabricjax.config import ClosConfig
from fabricjax.fabric.bom import bom

SMALL = os.environ.get("FABRICJAX_EXAMPLE_SMALL") == "1"
OUT = Path(os.environ.get("FABRICJAX_EXAMPLE_OUT", "."))
POLICIES = ["ecmp", "spray", "mrc"]

# %% [markdown]
# ## The base design
#
# The quickstart: 1,024 GPUs on 8 planes of 64-port 100G switches, a random permutation and
# a ring all-reduce over a scattered ring. `replace` takes dotted paths, as
# `fabricjax sweep --set` does, and validates the result: a bad value raises
# `fj.ScenarioError` naming the field.

# %%
base = fj.load("scenarios/quickstart.yaml")
if SMALL:
    base = base.replace({"fabric.gpus": 128, "fabric.radix": 16})

try:
    base.replace({"fabric.radix": 63})
except fj.ScenarioError as error:
    print("refused:", error)

# %% [markdown]
# ## Planes: one 800G port or eight 100G ports
#
# The NIC keeps its 800G and the switch keeps its chip: a switch ASIC of fixed capacity
# offers 64 ports of 800G or 512 of 100G, so a design with P planes of 800/P G ports uses
# switches of P times the radix. Each design is analysed under every policy;
# `to_pandas()` gives one row per policy and workload item.

# %%
PLANES = [1, 2, 4, 8]
RADIX = 16 if SMALL else 64          # ports of the switch chip at 800G


def design_of(planes: int) -> dict:
    """The fabric section of the design with `planes` planes."""
    return {"fabric.planes": planes, "fabric.port_gbps": f"{800 // planes}G",
            "fabric.radix": RADIX * planes}


rows = []
for planes in PLANES:
    design = base.replace(design_of(planes))
    frame = fj.analyze(design, policies=POLICIES).to_pandas()
    frame["planes"] = planes
    rows.append(frame)
by_planes = pd.concat(rows, ignore_index=True)
print(by_planes.pivot_table(index="planes", columns=["policy", "workload"],
                            values="p100_utilisation").round(3).to_string())

# %% [markdown]
# ECMP's P100 grows with the planes (more, thinner bins for the same hashed flows);
# spraying and MRC stay near 1 as long as each flow's EVs reach every spine, and more
# planes of higher-radix switches need fewer tiers and fewer switches per GPU.
#
# ## Entropy values: how many does spraying need?
#
# `fj.sweep` evaluates a grid of values and returns a DataFrame, one row per point, policy
# and workload item. EVs are drawn equally per plane, so they must be a multiple of the
# planes.

# %%
EVS = [8, 16, 32] if SMALL else [16, 32, 64, 128, 256]
spray = fj.sweep(base.replace({"policies": ["spray"]}), {"spray.evs": EVS})
mrc = fj.sweep(base.replace({"policies": ["mrc"]}), {"mrc.evs": EVS})
spray["evs"] = spray["spray.evs"]
mrc["evs"] = mrc["mrc.evs"]
by_evs = pd.concat([spray, mrc], ignore_index=True)
print(by_evs.pivot_table(index="evs", columns=["policy", "workload"],
                         values="p100_utilisation").round(3).to_string())

# %% [markdown]
# ## The bill of materials, and a price table of your own
#
# `fabricjax topo` prints each design's switches, optics modules and power; the same
# figures come from `fabricjax.fabric.bom.bom` for a fabric section. Join them with prices
# (these are placeholders: put your own quotes in) to get a cost per GPU.

# %%
PRICES = {"switch": 25_000.0, "module": 900.0, "kw_year": 1_000.0}  # USD, placeholders

materials = []
for planes in PLANES:
    section = {"gpus": 128 if SMALL else 1024, "planes": planes,
               "port_gbps": 800 / planes, "radix": RADIX * planes}
    b = bom(ClosConfig(**section))
    materials.append({"planes": planes, "switches": b["switches"], "modules": b["modules"],
                      "kw": b["watts"] / 1e3, "gpus": b["gpus"]})
materials = pd.DataFrame(materials)
materials["cost_per_gpu"] = (materials["switches"] * PRICES["switch"]
                             + materials["modules"] * PRICES["module"]
                             + materials["kw"] * PRICES["kw_year"]) / materials["gpus"]
print(materials.round(1).to_string(index=False))

# %% [markdown]
# ## The trade-off
#
# The permutation's P100 under each policy against the fabric's cost per GPU, one point
# per plane count: the designs to the lower left are both cheap and balanced.

# %%
permutation = by_planes[by_planes["workload"] == "permutation"].merge(materials, on="planes")
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
for policy, group in permutation.groupby("policy"):
    left.plot(group["cost_per_gpu"], group["p100_utilisation"], marker="o", label=policy)
    for _, row in group.iterrows():
        left.annotate(f"{row['planes']}p", (row["cost_per_gpu"], row["p100_utilisation"]),
                      textcoords="offset points", xytext=(4, 4), fontsize=8)
left.set_xlabel("fabric cost per GPU (USD, placeholder prices)")
left.set_ylabel("P100 link utilisation (permutation)")
left.set_title("Planes: tail against cost")
left.legend()
evs_perm = by_evs[by_evs["workload"] == "permutation"]
for policy, group in evs_perm.groupby("policy"):
    right.plot(group["evs"], group["p100_utilisation"], marker="o", label=policy)
right.set_xscale("log", base=2)
right.set_xlabel("EVs per flow")
right.set_ylabel("P100 link utilisation (permutation)")
right.set_title("Entropy values: where the tail flattens")
right.legend()
fig.tight_layout()
fig.savefig(OUT / "tradeoff.png", dpi=120)

# %% [markdown]
# One more figure comes straight from a report: `fj.plot.cdf` returns the CDF of link
# utilisation per policy as a matplotlib figure, unsaved.

# %%
cdf = fj.plot.cdf(fj.analyze(base, policies=POLICIES))
cdf.savefig(OUT / "utilisation_cdf.png", dpi=120)
print("P100 by design and policy, the bill of materials and two figures written to", OUT)
