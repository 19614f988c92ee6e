"""fabricjax: a vectorised flow-level analyser of multi-plane AI-training fabrics.

The public entry points: `load_scenario` (YAML -> validated Scenario), `analyze` (Scenario ->
Report), `build_fabric` and `fabric_summary` (topology), and the jitted core in
`fabricjax.solver`. JAX is imported only by the modules that compute.
"""

__version__ = "0.1.0"

from fabricjax.errors import ScenarioError
from fabricjax.scenario import Scenario, load_scenario, parse_scenario

__all__ = ["ScenarioError", "Scenario", "load_scenario", "parse_scenario", "__version__"]
