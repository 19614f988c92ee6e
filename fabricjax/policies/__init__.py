"""Layer 4: the load-balancing policies, one module each, behind one interface (`base`).

Importing this package registers the built-in policies and their settings models
(`core.registry`), in the reports' column order; `get(name)` returns the policy object for a
scenario's name. Modules, in the order they may import each other: `base`, `ecmp`, `spray`,
`mrc` (starts from spray's draw), `optimal`. A new policy is one module that defines its
settings model, subclasses `base.Policy` and calls `core.registry.register`
(tests/test_policy_plugin.py adds a toy one from the test file alone).
"""

from __future__ import annotations

import json

from fabricjax.config import scenario_schema
from fabricjax.core.registry import known_names, lookup
from fabricjax.policies import ecmp, mrc, optimal, spray  # noqa: F401  (they register)
from fabricjax.policies.base import Policy


def get(name: str) -> Policy:
    """The registered policy called `name` (a KeyError names the known ones)."""
    try:
        return lookup(name)
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(known_names())}") from None


def schema_text() -> str:
    """The scenario JSON Schema with every registered policy's section, as `fabricjax schema`
    prints it and `scenarios/schema.json` holds it (two-space indents, a final newline)."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False) + "\n"
