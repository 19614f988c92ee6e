"""fabricjax: a vectorised flow-level analyser of multi-plane AI-training fabrics.

The Python API (`fabricjax.api`; figures in `fabricjax.plot`)::

    import fabricjax as fj
    sc = fj.load("scenarios/quickstart.yaml")
    rep = fj.analyze(sc.replace({"fabric.planes": 4}), policies=["ecmp", "mrc"])
    df = rep.to_pandas()

The package is a stack of layers (DESIGN section 6); a module imports only from layers below
it. This top level imports no JAX (nor matplotlib): a computation imports it when it runs.
"""

from fabricjax import plot
from fabricjax.api import (Analysis, Scenario, ScenarioError, analyze, configure, grid, load,
                           sweep)
from fabricjax.core.version import __version__

__all__ = ["Analysis", "Scenario", "ScenarioError", "__version__", "analyze", "configure",
           "grid", "load", "plot", "sweep"]
