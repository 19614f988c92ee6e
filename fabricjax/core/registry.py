"""The load-balancing policies a scenario may ask for: the registry the policies fill.

A policy (an object of `fabricjax.policies.base.Policy`, layer 4) registers itself when its
module is imported; importing `fabricjax.policies` registers the built-in ones. The layers
below ask the registry, never the modules, so the schema (layer 1) and the loader (layer 3)
learn each policy's name, its settings model (its section of a scenario, e.g. `mrc:`) and
its column order from here. Nothing here names a policy: a new one is one module that calls
`register(policy)`.
"""

from __future__ import annotations

from typing import Any

_POLICIES: dict[str, Any] = {}


def register(policy: Any) -> Any:
    """Make `policy` (an object with a `name` and a `stream`) available to scenarios and the
    engine, after the ones registered before it (the column order of every report). A name
    registered again replaces the earlier object in its place. Its RNG `stream` must differ
    from every other policy's, so that adding a policy never changes another's draws
    (ValueError otherwise). Returns `policy` (usable as a decorator)."""
    for other in _POLICIES.values():
        if other.name != policy.name and other.stream == policy.stream:
            raise ValueError(f"policy {policy.name!r}: stream {policy.stream} is already "
                             f"{other.name!r}'s; each policy draws from its own stream")
    _POLICIES[policy.name] = policy
    return policy


def unregister(name: str) -> None:
    """Forget a registered policy (tests that add a toy policy clean up with this)."""
    _POLICIES.pop(name, None)


def known_names() -> tuple[str, ...]:
    """Every name a scenario may use, in the order they were registered."""
    return tuple(_POLICIES)


def lookup(name: str) -> Any:
    """The policy object registered under `name` (KeyError when none is)."""
    return _POLICIES[name]


def sections() -> dict[str, Any]:
    """{name: settings model} of every registered policy that has settings (a pydantic model
    class: its section of a scenario, under the policy's name)."""
    return {name: policy.settings_model for name, policy in _POLICIES.items()
            if getattr(policy, "settings_model", None) is not None}
