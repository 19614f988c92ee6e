"""fabricjax: a vectorised flow-level analyser of multi-plane AI-training fabrics.

The package is a stack of layers (README, "Layout"); a module imports only from layers below
it. Entry points: `fabricjax.scenario.load_scenario` (YAML -> validated Scenario),
`fabricjax.study.analyze.analyze` (Scenario -> Report), `fabricjax.sweep` (grids of
scenarios), `fabricjax.report` (tables, JSON, plots; never imports JAX). This top level
imports nothing heavy, so `--help` stays instant.
"""

from fabricjax.core.version import __version__

__all__ = ["__version__"]
