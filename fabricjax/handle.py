"""A notebook user's handle on a scenario: `Scenario` (read, changed by dotted paths,
validated anew each time) and `load`. Plain pydantic and numpy: nothing here imports JAX, so
`fj.load(...)` and `sc.replace(...)` stay light until a computation runs (`fabricjax.api`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from fabricjax.config import Scenario as ScenarioConfig
from fabricjax.scenario import load_scenario, parse_scenario, with_paths
from fabricjax.workload.build import traffic_flow_counts


class Scenario:
    """A validated scenario. Read its sections as attributes (`sc.fabric.planes`); change it
    with `replace`, which returns a new, validated Scenario. `config` is the pydantic model the
    studies take."""

    def __init__(self, config: ScenarioConfig):
        if not isinstance(config, ScenarioConfig):
            raise TypeError(f"Scenario wraps a validated scenario, not {type(config).__name__}; "
                            "use fj.load(path) or fj.Scenario.from_dict(data)")
        self.config = config

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base_dir: str | Path | None = None
                  ) -> "Scenario":
        """A scenario from the data a YAML file would hold; `base_dir`: where its graph and
        traffic files are (default: the current folder)."""
        folder = Path(base_dir) if base_dir is not None else Path(".")
        config = parse_scenario(dict(data), base_dir=folder)
        return cls(config.located(folder, traffic_flow_counts(config)))

    @classmethod
    def load(cls, path: str | Path) -> "Scenario":
        """Read and validate a scenario file."""
        return cls(load_scenario(path))

    def replace(self, values: Mapping[str, Any] | None = None, /, **fields: Any) -> "Scenario":
        """A new scenario with fields changed: dotted paths (``{"fabric.planes": 4,
        "workload[0].size": "1GiB"}``) and top-level fields as keywords (``seed=3``). Values
        are read as in the YAML file (``"100G"``, ``"1GiB"``)."""
        changes = {**dict(values or {}), **fields}
        return Scenario(with_paths(self.config, changes))

    def to_dict(self) -> dict:
        """The scenario as JSON data, every default filled in."""
        return self.config.model_dump(mode="json")

    @property
    def name(self) -> str:
        return self.config.name

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "config":
            raise AttributeError(name)
        return getattr(self.config, name)

    def __repr__(self) -> str:
        fabric = self.config.fabric
        items = ", ".join(item.name or item.collective for _, _, item in self.config.items)
        return (f"Scenario({self.config.name!r}: {fabric.gpus:,} GPUs, {fabric.kind}, "
                f"workload [{items}], policies {list(self.config.policies)})")


def load(path: str | Path) -> Scenario:
    """Read and validate a scenario file (a ScenarioError names the file and the field)."""
    return Scenario.load(path)


def as_config(scenario: Scenario | ScenarioConfig | str | Path) -> ScenarioConfig:
    """The validated scenario behind a Scenario, a validated scenario or a file's path."""
    if isinstance(scenario, Scenario):
        return scenario.config
    if isinstance(scenario, ScenarioConfig):
        return scenario
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario)
    raise TypeError(f"expected a Scenario, a scenario file's path or a validated scenario, "
                    f"got {type(scenario).__name__}")
