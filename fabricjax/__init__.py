"""fabricjax: a vectorised flow-level analyser of multi-plane AI-training fabrics.

The Python API (`fabricjax.api`; figures in `fabricjax.plot`), after
`import fabricjax as fj`::

    sc = fj.load("scenarios/quickstart.yaml")
    rep = fj.analyze(sc.replace({"fabric.planes": 4}), policies=["ecmp", "mrc"])
    df = rep.to_pandas()
    best = fj.design("scenarios/design-demo.yaml").best   # the cheapest fabric meeting a target

The package is a stack of layers (DESIGN section 6); a module imports only from layers below
it. This top level imports no JAX (nor matplotlib): the API module, which runs the studies,
is loaded on the first use of one of its names.
"""

import importlib

from fabricjax import plot
from fabricjax.core.errors import ScenarioError
from fabricjax.core.version import __version__

# the API's calls run the studies, which import JAX: their module is loaded on the first use
# of one of them (PEP 562), so `import fabricjax`, `--help` and `fj.load(...).replace(...)`
# stay light
LAZY = {"Scenario": "fabricjax.handle", "load": "fabricjax.handle",
        **{name: "fabricjax.api" for name in ("Analysis", "Design", "Prepared", "analyze",
                                              "configure", "design", "grid", "prepare",
                                              "sweep")}}

__all__ = ["ScenarioError", "__version__", "plot", *LAZY]


def __getattr__(name: str):
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    raise AttributeError(f"module 'fabricjax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY))
