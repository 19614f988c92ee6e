"""The report as JSON: every field finite, or None with a status saying why.

Contract: `report_dict(report)` is the JSON form of a `results.Report` (the `versions` the
study recorded included); a NaN or infinity anywhere raises `NonFiniteError` naming the field
instead of being printed or turned into null. Writing is `core.output`'s job. No JAX here.
"""

from __future__ import annotations

import math
from typing import Any

from fabricjax.results import Report


class NonFiniteError(ValueError):
    """A NaN or infinity reached a report: a bug in the code that computed it, never data."""


def finite(value: Any, where: str = "") -> Any:
    """`value` unchanged after checking, recursively, that every float in it is finite.

    A number that was not computed is `None` with a status saying why, decided where it is
    computed (a stalled collective's completion time, an empty distribution); a NaN or
    infinity here means some code forgot to, and is raised rather than silently printed or
    turned into null."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonFiniteError(f"report field {where or '<root>'} is {value}")
        return value
    if isinstance(value, dict):
        return {k: finite(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def report_dict(report: Report) -> dict:
    """The report's JSON form (see the module docstring)."""
    return finite({
        "scenario": report.scenario,
        "seed": report.seed,
        "versions": report.versions,
        "fabric": report.fabric,
        "solver": report.solver,
        "config": report.config,
        # each policy's description and the model choices it ran with (spraying's placement)
        "policies": report.policies,
        "results": [r.as_dict() for r in report.records],
        "failures": report.failures.as_dict() if report.failures is not None else None,
        "reliability": ([r.as_dict() for r in report.reliability]
                        if report.reliability is not None else None),
        "sharing": ([r.as_dict() for r in report.sharing]
                    if report.sharing is not None else None),
        "sensitivity": report.sensitivity,
        "steps": ([r.as_dict() for r in report.steps] if report.steps is not None else None),
    })


