"""A sweep's grid: `--set path=v1,v2,...` options in, one validated Scenario per point out.

Contract: `parse_sets` and `sweep_points` raise a `ScenarioError` whose field names `--set`
before anything is computed (every point is validated up front, through the scenario's own
dotted-path overrides: `scenario.split_path`, `assign_path`). No JAX here.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from typing import Any, NamedTuple

import yaml

from fabricjax.config import Scenario
from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.core.units import value_text
from fabricjax.scenario import (SafeLoader, assign_path, parse_scenario, split_path,
                                traffic_key)
from fabricjax.workload.build import traffic_flow_counts

MAX_POINTS = 10_000
FIELD = "--set"


@dataclasses.dataclass(frozen=True)
class Axis:
    """One `--set` option: the `paths` that move together and their values, one tuple per
    grid value (`values`: as YAML read each token; `tokens`: the text as written)."""

    paths: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    tokens: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.values)


class Point(NamedTuple):
    """One grid point: {path: value} of every swept path, and the validated scenario."""

    values: dict[str, Any]
    scenario: Scenario

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={value_text(v)}" for path, v in self.values.items())


# --------------------------------------------------------------------------- parsing

def _yaml_value(token: str, path: str) -> Any:
    try:
        return yaml.load(token, Loader=SafeLoader)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or "unparseable"
        raise ScenarioError(FIELD, f"{path}={short_repr(token)} is not a YAML value "
                            f"({problem})") from None
    except RecursionError:
        raise ScenarioError(FIELD, f"{path}={short_repr(token)} is nested too deeply") from None


def parse_sets(options: list[str]) -> list[Axis]:
    """One Axis per option: ``path=v1,v2,...``, or zipped ``p1,p2=a1:a2,b1:b2`` (the paths
    move together, each value a colon-separated tuple). Each token is read as YAML (`2`,
    `1.5`, `true`, `100G`, `1GiB`). Raises ScenarioError('--set', ...) on a missing `=`, an
    empty value, a path given twice (or inside another), a tuple of the wrong length, or more
    than MAX_POINTS grid points in all."""
    axes: list[Axis] = []
    seen: dict[tuple, str] = {}
    points = 1
    for option in options:
        if "=" not in option:
            raise ScenarioError(FIELD, f"{short_repr(option)} has no '='; expected "
                                "path=v1,v2,... (e.g. fabric.planes=1,2,4,8)")
        left, right = option.split("=", 1)
        paths = tuple(p.strip() for p in left.split(","))
        names = ",".join(paths)
        for path in paths:
            parts = split_path(path, FIELD)
            for other_parts, other in seen.items():
                shorter = min(len(parts), len(other_parts))
                if parts[:shorter] == other_parts[:shorter]:
                    what = ("is set twice" if parts == other_parts else
                            f"and {other} overlap (one lies inside the other)")
                    raise ScenarioError(FIELD, f"{path} {what}; each field may be swept by "
                                        "one --set")
            seen[parts] = path
        if not right.strip():
            raise ScenarioError(FIELD, f"{names}= has no values; expected {names}=v1,v2,...")
        tokens = []
        for token in (t.strip() for t in right.split(",")):
            if not token:
                raise ScenarioError(FIELD, f"{names}={short_repr(right)} has an empty value "
                                    "(two commas, or one at an end)")
            # one path: a colon is part of the value; zipped paths: it separates the values
            parts = tuple(t.strip() for t in token.split(":")) if len(paths) > 1 else (token,)
            if len(parts) != len(paths):
                raise ScenarioError(FIELD, f"{short_repr(token)} has {len(parts)} "
                                    f"colon-separated value(s) but {names} names "
                                    f"{len(paths)} fields; expected one per field, e.g. "
                                    f"{':'.join(['v'] * len(paths))}")
            if not all(parts):
                raise ScenarioError(FIELD, f"{short_repr(token)} has an empty value in {names}")
            tokens.append(parts)
        for i, token in enumerate(tokens):
            if token in tokens[:i]:
                raise ScenarioError(FIELD, f"{names} lists {':'.join(token)} twice")
        points *= len(tokens)
        if points > MAX_POINTS:
            raise ScenarioError(FIELD, f"the options make more than {MAX_POINTS:,} grid points; "
                                "allowed: up to that many (sweep fewer values, or zip fields "
                                "that move together: a,b=1:x,2:y)")
        values = tuple(tuple(_yaml_value(t, p) for t, p in zip(token, paths))
                       for token in tokens)
        axes.append(Axis(paths, values, tuple(tokens)))
    return axes


# --------------------------------------------------------------------------- grid points

def _blame(error: ScenarioError, axes: list[Axis], tokens: dict, option: str) -> str:
    """The `--set` settings a validation error is about (as an error's field): those of the
    one option whose paths contain the error's field (or lie inside it), else all."""
    def related(path: str) -> bool:
        return bool(error.field) and (error.field == path or
                                      error.field.startswith((path + ".", path + "[")) or
                                      path.startswith((error.field + ".", error.field + "[")))
    owners = [axis.paths for axis in axes if any(related(p) for p in axis.paths)]
    named = owners[0] if len(owners) == 1 else list(tokens)
    return set_field({p: tokens[p] for p in named}, option)


def set_field(settings: dict[str, str], option: str = FIELD) -> str:
    """An error's field for a point's settings, as typed: ``--set a=1 --set b=x`` (with
    `option` "": ``a=1, b=x``, the Python API's words)."""
    if not option:
        return ", ".join(f"{path}={text}" for path, text in settings.items())
    return " ".join(f"{option} {path}={text}" for path, text in settings.items())


def sweep_points(base: Scenario, axes: list[Axis], option: str = FIELD) -> list[Point]:
    """The Cartesian product of `axes` (zipped paths move together; the first axis varies
    slowest), each applied to `base.model_dump()` and validated with `parse_scenario`, with
    the base's private attributes (scenario folder, traffic flow counts) carried over. No axes:
    one point, the base itself. Raises ScenarioError('--set ...') for a path the scenario does
    not have or a value it refuses, before anything is computed (`option` "": the field is the
    path itself, as the Python API names it)."""
    dump = base.model_dump()
    def field(path: str) -> str:
        return f"{option} {path}" if option else path

    parts_of = {path: split_path(path, option or path) for axis in axes for path in axis.paths}
    probe = copy.deepcopy(dump)
    for path, parts in parts_of.items():    # a bad path is reported once, whatever the values
        assign_path(probe, parts, None, field(path))
    base_key = traffic_key(base)
    traffic_flows: dict[tuple, dict] = {base_key: base.traffic_flows}
    points = []
    for combo in itertools.product(*(range(len(axis)) for axis in axes)):
        data = copy.deepcopy(dump)
        values: dict[str, Any] = {}
        tokens: dict[str, str] = {}
        for axis, index in zip(axes, combo):
            for path, value, token in zip(axis.paths, axis.values[index], axis.tokens[index]):
                assign_path(data, parts_of[path], value, field(path))
                values[path], tokens[path] = value, token
        try:
            scenario = parse_scenario(data, default_name=base.name, base_dir=base.base_dir)
            key = traffic_key(scenario)
            if key not in traffic_flows:
                traffic_flows[key] = traffic_flow_counts(scenario)
            scenario.located(base.base_dir, traffic_flows[key])
        except ScenarioError as err:
            where = f"{err.field}: " if err.field else ""
            raise ScenarioError(_blame(err, axes, tokens, option),
                                f"{where}{err.message}", err.source) from None
        points.append(Point(values, scenario))
    return points
