"""The names of the load-balancing policies a scenario may ask for, and the policy objects
behind them.

The objects live in `fabricjax.policies` (layer 4) and register themselves there on import;
the schema (layer 1) validates a scenario's `policies` against `known_names()` before any of
them is imported, so the built-in names are known from the start. A new policy is one module
that calls `register(policy)` (and one line in `fabricjax.policies` for a built-in one).
"""

from __future__ import annotations

from typing import Any

BUILTIN = ("ecmp", "spray", "mrc", "optimal")   # the column order of every report
_POLICIES: dict[str, Any] = {}


def register(policy: Any) -> Any:
    """Make `policy` (an object with a `name`) available to scenarios and the engine; a name
    registered again replaces the earlier object. Returns `policy` (usable as a decorator)."""
    _POLICIES[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Forget a registered policy (tests that add a toy policy clean up with this)."""
    if name not in BUILTIN:
        _POLICIES.pop(name, None)


def known_names() -> tuple[str, ...]:
    """Every name a scenario may use: the built-in ones, then those registered since."""
    return BUILTIN + tuple(n for n in _POLICIES if n not in BUILTIN)


def lookup(name: str) -> Any:
    """The policy object registered under `name` (KeyError when none is)."""
    return _POLICIES[name]
