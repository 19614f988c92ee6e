"""fabricjax: a vectorised flow-level analyser of multi-plane AI-training fabrics.

Entry points: `load_scenario` (YAML -> validated Scenario, exported here);
`fabricjax.analysis.analyze` (Scenario -> Report); `fabricjax.fabric.build_fabric` and
`fabric_summary` (topology); `fabricjax.workload` (collectives, placement, jobs);
`fabricjax.traffic` (CSV / .npz / htsim matrices in and out); the jitted core in
`fabricjax.solver`, `fabricjax.mrc`, `fabricjax.optimal`, `fabricjax.progressive` (flow-level
completion) and `fabricjax.aggregate` (all-to-all classes). This package's top level does not
import JAX, so `--help` stays instant.
"""

__version__ = "0.1.0"

from fabricjax.errors import ScenarioError
from fabricjax.scenario import Scenario, load_scenario, parse_scenario

__all__ = ["ScenarioError", "Scenario", "load_scenario", "parse_scenario", "__version__"]
