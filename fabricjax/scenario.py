"""Scenario files: YAML in, a validated `config.Scenario` out, or one `ScenarioError` naming
the field.

The loader reads with a safe YAML loader only (no tags that build objects), validates with the
strict pydantic models of `fabricjax.config`, then checks what a schema cannot: that the fabric
is buildable, that the workload's GPUs exist, that failure names are components of the fabric,
and that graph and traffic files read cleanly. Defaults, then the file, then command-line
overrides (`with_overrides`): the later wins.

A policy's section (`mrc:`) is checked against the settings model its policy registered
(`core.registry`; importing `fabricjax.policies` registers the built-in ones, as the engine,
the studies and the `schema` command do). A process that registered no policy (one that
solves nothing, such as `fabricjax topo`, which never imports JAX) keeps the sections as given;
`check_sections` checks them once the policies are registered (the engine's memory check and
`Policy.section` call it).
"""

from __future__ import annotations

import hashlib
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Union

import pydantic
import yaml
from pydantic import BaseModel

from fabricjax.config import (COLLECTIVES, FABRIC_KINDS, AllReduceConfig, ChakraConfig,
                              DesignConfig, FabricKind, PermutationConfig, RankedConfig,
                              Scenario, SendRecvConfig, TrafficConfig, TrainingConfig, job_size)
from fabricjax.core.errors import ScenarioError, one_line, short_repr
from fabricjax.core.registry import known_names, lookup, sections
from fabricjax.fabric.build import build
from fabricjax.fabric.failures import check_failures
from fabricjax.fabric.spec import check_fabric
from fabricjax.workload.build import traffic_flow_counts
from fabricjax.workload.flows import MAX_PHASE_FLOWS


def check_sections(scenario: Scenario) -> Scenario:
    """Check the policies' sections against the registered settings models, in place: every
    extra key must be a registered policy's section; each section is validated (its defaults
    filled in, a missing one added), the `policies` named must be registered, then each
    policy's own `check` runs. ScenarioError names the first bad field. Nothing happens while
    no policy is registered. Returns `scenario`."""
    if not known_names():
        return scenario
    models = sections()
    extra = scenario.__pydantic_extra__
    if not scenario.policies and "policies" not in scenario.model_fields_set:
        # parsed before any policy registered: the default, every registered one, is known now
        scenario.__dict__["policies"] = list(known_names())
    for key in extra:
        if key not in models:
            raise ScenarioError(key, f"unknown field {key!r}; allowed: "
                                f"{', '.join(allowed_fields(()) or ())}")
    for i, name in enumerate(scenario.policies):
        if name not in known_names():
            allowed = ", ".join(repr(n) for n in known_names())
            raise ScenarioError(f"policies[{i}]", f"unknown policy (got {_short(name)}); "
                                f"allowed: {allowed}")
    if not scenario.policies:
        raise ScenarioError("policies", "needs at least 1 policy")
    checked = {}
    for name, model in models.items():
        value = extra.get(name, {})
        if not isinstance(value, model):
            try:
                value = model.model_validate({} if value is None else value)
            except pydantic.ValidationError as err:
                raise _format_validation_error(err, model, (name,)) from None
        checked[name] = value
    extra.clear()      # in the registry's order, whatever the file's
    extra.update(checked)
    for name in known_names():
        lookup(name).check(scenario)
    return scenario


def check_timed_failures(scenario: Scenario) -> None:
    """A failure that strikes during a phase (`failures.at_s`) is seen only by the level that
    has time in it."""
    failures = scenario.failures
    if failures is not None and failures.at_s is not None and \
            scenario.solver.model != "dynamic":
        raise ScenarioError("failures.at_s", "a failure during the phase needs "
                            "solver.model: dynamic (allowed with static: leave at_s out)")


def check_workload(scenario: Scenario) -> None:
    """What a schema cannot say about the workload items and jobs (ScenarioError on the
    first problem): GPUs exist and suffice, placements match their `gpus`, jobs fit on the
    fabric together, and each algorithm's constraints on the GPU count hold."""
    n = scenario.fabric.gpus
    if not scenario.items:
        raise ScenarioError("workload", "is missing or empty; a scenario needs at least 1 "
                            "item (or 'jobs': a list of the same items, sharing the fabric)")
    for section, i, item in scenario.items:
        field = f"{section}[{i}].gpus"
        if isinstance(item.gpus, int):
            if item.gpus > n:
                raise ScenarioError(field, f"{item.gpus} GPUs requested but the fabric has {n}")
        elif isinstance(item.gpus, list):
            if len(item.gpus) < 2:
                raise ScenarioError(field, "a job needs at least 2 GPUs")
            bad = [g for g in item.gpus if not 0 <= g < n]
            if bad:
                raise ScenarioError(field, f"GPU {bad[0]} does not exist; allowed: 0..{n - 1}")
            if len(set(item.gpus)) != len(item.gpus):
                raise ScenarioError(field, "lists a GPU more than once")
        explicit = isinstance(item.gpus, list)
        if item.placement == "explicit" and not explicit:
            raise ScenarioError(f"{section}[{i}].placement",
                                "'explicit' needs gpus: a list of GPU ids")
        if explicit and item.placement not in (None, "explicit"):
            raise ScenarioError(f"{section}[{i}].placement",
                                f"{item.placement!r} places a GPU count, but gpus is a list; "
                                "allowed with a list: explicit (or leave placement out)")
        size = job_size(item, n)
        if isinstance(item, PermutationConfig) and item.shift is not None:
            if item.shift % size == 0:
                raise ScenarioError(
                    f"{section}[{i}].shift",
                    f"{item.shift} maps every GPU onto itself in a {size}-GPU job; "
                    f"allowed: any integer not a multiple of {size}",
                )
        if isinstance(item, AllReduceConfig) and item.algorithm == "halving-doubling":
            if size & (size - 1):
                low = 1 << (size.bit_length() - 1)
                raise ScenarioError(
                    f"{section}[{i}].algorithm",
                    f"halving-doubling needs a power-of-two GPU count (got {size}); allowed: "
                    f"gpus {low} or {2 * low}, or algorithm ring or tree")
        if isinstance(item, RankedConfig) and item.hierarchical and item.algorithm != "ring":
            raise ScenarioError(f"{section}[{i}].hierarchical",
                                f"hierarchical runs rings; allowed with algorithm ring only "
                                f"(got {item.algorithm!r})")
        if isinstance(item, SendRecvConfig) and size % 2:
            raise ScenarioError(field, f"send-recv pairs the ranks, so the GPU count must be "
                                f"even (got {size})")
        if isinstance(item, TrainingConfig):
            check_training(item, size, f"{section}[{i}]")
    jobs = scenario.jobs
    if jobs:
        total = sum(job_size(job, n) for job in jobs)
        if total > n:
            raise ScenarioError("jobs", f"the jobs need {total} GPUs together but the fabric "
                                f"has {n}; jobs run at once on disjoint GPUs ('all' takes "
                                "every GPU)")
        owner: dict[int, int] = {}
        for i, job in enumerate(jobs):
            for gpu in job.gpus if isinstance(job.gpus, list) else ():
                if gpu in owner:
                    raise ScenarioError(f"jobs[{i}].gpus", f"GPU {gpu} is already "
                                        f"jobs[{owner[gpu]}]'s; jobs run on disjoint GPUs")
                owner[gpu] = i



def check_training(item: TrainingConfig, size: int, field: str) -> None:
    """A parallelism plan that fits its GPUs and its model: tp x pp x dp = GPUs, whole
    layers per stage, experts split evenly over the expert-parallel ranks."""
    par, model = item.parallel, item.model
    if size % (par.tp * par.pp):
        raise ScenarioError(f"{field}.parallel", f"tp x pp = {par.tp * par.pp} does not divide "
                            f"the item's {size} GPUs; allowed: tp x pp x dp = {size}")
    dp = size // (par.tp * par.pp)
    if par.dp is not None and par.dp != dp:
        raise ScenarioError(f"{field}.parallel.dp", f"tp {par.tp} x pp {par.pp} x dp {par.dp} "
                            f"= {par.tp * par.pp * par.dp}, but the item has {size} GPUs; "
                            f"allowed: dp {dp} (or leave dp out)")
    if model.layers % par.pp:
        raise ScenarioError(f"{field}.model.layers", f"{model.layers} layers cannot be split "
                            f"evenly over pp {par.pp} stages; allowed: a multiple of {par.pp}")
    if par.ep > 1 and model.experts == 0:
        raise ScenarioError(f"{field}.parallel.ep", f"ep {par.ep} needs a mixture of experts; "
                            "allowed: model.experts > 0, or ep 1")
    if par.ep > 1 and dp % par.ep:
        raise ScenarioError(f"{field}.parallel.ep", f"expert-parallel ranks are carved out of "
                            f"the dp {dp} data-parallel ones; allowed: an ep that divides {dp}")
    if model.experts:
        if model.experts % par.ep:
            raise ScenarioError(f"{field}.model.experts", f"{model.experts} experts cannot be "
                                f"spread evenly over ep {par.ep}; allowed: a multiple of "
                                f"{par.ep}")
        if model.top_k > model.experts:
            raise ScenarioError(f"{field}.model.top_k", f"top_k {model.top_k} exceeds the "
                                f"{model.experts} experts; allowed: 1..{model.experts}")
        stage = model.layers // par.pp
        if stage % model.moe_every:
            raise ScenarioError(f"{field}.model.moe_every", f"every pipeline stage has {stage} "
                                f"layers, not a multiple of moe_every {model.moe_every}; "
                                "allowed: a divisor of the layers per stage")
    flows = size * max(par.ep - 1, 2)
    if flows > MAX_PHASE_FLOWS:
        raise ScenarioError(f"{field}.parallel.ep", f"the expert all-to-alls have {flows:,} "
                            f"flows at once, more than the {MAX_PHASE_FLOWS:,} fabricjax builds; "
                            "allowed: fewer GPUs or a smaller ep")


# --------------------------------------------------------------------------- error messages

def _strip_annotated(annotation: Any) -> Any:
    """The model type behind Annotated[...] and Optional[...] (X | None)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _strip_annotated(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_annotated(args[0])
    return annotation


def allowed_fields(loc: tuple, root: type[BaseModel] = Scenario) -> list[str] | None:
    """Field names allowed at `loc` (the parent of an unknown key), walking the models from
    `root` (the scenario: its fields, then the registered policies' sections)."""
    if root is Scenario and loc and loc[0] in sections():
        root, loc = sections()[loc[0]], loc[1:]
    elif root is Scenario and not loc:
        return list(Scenario.model_fields) + list(sections())
    node: Any = root
    for part in loc:
        node = _strip_annotated(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return None
            node = node.model_fields[part].annotation
            continue
        origin = typing.get_origin(node)
        if origin is list and isinstance(part, int):
            node = typing.get_args(node)[0]
            continue
        if origin in (Union, types.UnionType) and isinstance(part, str):
            variants = [
                v for v in map(_strip_annotated, typing.get_args(node))
                if isinstance(v, type) and issubclass(v, BaseModel)
                and any(tag in v.model_fields and
                        part in typing.get_args(v.model_fields[tag].annotation)
                        for tag in UNION_TAGS)
            ]
            if not variants:
                return None
            node = variants[0]
            continue
        return None
    node = _strip_annotated(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return None


# the unions of models told apart by a field (a workload item's collective, a fabric's kind):
# per section, where pydantic's loc puts the tag (after the item's index, after `fabric`), the
# field and its value when left out
_UNIONS = {"workload": (2, "collective", None), "jobs": (2, "collective", None),
           "fabric": (1, "kind", FabricKind.CLOS.value)}
UNION_TAGS = tuple(dict.fromkeys(tag for _, tag, _ in _UNIONS.values()))
_TAG_AT = {section: at for section, (at, _, _) in _UNIONS.items()}


def _field_path(loc: tuple) -> str:
    """Dotted path for a pydantic loc, without the union tag (``workload[0].permutation``,
    ``fabric.graph``)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif loc and _TAG_AT.get(loc[0]) == i and isinstance(part, str):
            continue  # the discriminated-union tag: the user never wrote it
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _short(value: Any) -> str:
    return short_repr(value, 60)


# A scenario is a few dozen values; YAML aliases can make a small file expand to billions.
MAX_SCENARIO_VALUES = 100_000
MAX_MERGED_KEYS = 10_000
MAX_SCENARIO_DEPTH = 32


def _check_values(data: Any) -> None:
    """Refuse, before validation walks it, data that expands (through shared YAML aliases) to
    more than MAX_SCENARIO_VALUES values, and any string or key holding a character that
    cannot be printed on one line (a control character, a line separator, a lone surrogate).
    Iterative and bounded by the count, so an alias bomb costs at most that many steps."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        value, path, depth = stack.pop()
        seen += 1
        if depth > MAX_SCENARIO_DEPTH:   # also keeps every path string short
            raise ScenarioError(path[:80] + "...", f"nested more than {MAX_SCENARIO_DEPTH} "
                                "levels deep (a YAML alias inside itself?); a scenario nests "
                                "a few")
        if seen > MAX_SCENARIO_VALUES:
            raise ScenarioError("", f"expands to more than {MAX_SCENARIO_VALUES:,} values "
                                "(YAML aliases repeating a large value?); a scenario is a few "
                                "dozen")
        if isinstance(value, str):
            bad = next((c for c in value if not (c.isprintable() or c in " \t")), None)
            if bad is not None:
                raise ScenarioError(path, f"contains the character U+{ord(bad):04X}; allowed: "
                                    "printable text on one line")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = one_line(str(key))
                child = f"{path}.{name}" if path else name
                if isinstance(key, str):
                    stack.append((key, child, depth + 1))
                stack.append((item, child, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


def _format_validation_error(err: pydantic.ValidationError, root: type[BaseModel] = Scenario,
                             prefix: tuple = ()) -> ScenarioError:
    """One ScenarioError for the first error of validating `root` (a policy's section, named
    by `prefix`, or the scenario)."""
    first = err.errors()[0]
    loc = tuple(first["loc"])
    path = _field_path(prefix + loc)
    kind = first["type"]
    msg = first["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if kind == "extra_forbidden":
        allowed = allowed_fields(loc[:-1], root)
        message = f"unknown field {loc[-1]!r}"
        if allowed:
            message += f"; allowed: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required field is missing"
    elif (kind in ("union_tag_invalid", "union_tag_not_found") and
          not isinstance(first.get("input"), dict)):
        message = ("expected a mapping of fields, e.g. {name: value} "
                   f"(got {_short(first.get('input'))})")
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        tag, names = (("kind", FABRIC_KINDS) if loc == ("fabric",) else
                      ("collective", COLLECTIVES))
        path += f".{tag}"
        allowed = ", ".join(repr(c) for c in names)
        if kind == "union_tag_invalid":
            message = f"unknown {tag} {_short(first['ctx']['tag'])}; allowed: {allowed}"
        else:
            message = f"required field is missing; allowed: {allowed}"
    elif kind == "literal_error" and path == "fabric.tiers":
        message = (f"{msg[0].lower() + msg[1:]} (got {_short(first['input'])}); two tiers: "
                   "kind multiplane-clos, three: kind fat-tree")
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        message = ("expected a mapping of fields, e.g. {name: value} "
                   f"(got {_short(first['input'])})")
    elif kind == "list_type":
        message = f"expected a list, e.g. [item, item] (got {_short(first['input'])})"
    else:
        message = msg[0].lower() + msg[1:] if msg else kind
        if "input" in first and "got" not in message:
            message += f" (got {_short(first['input'])})"
    more = len(err.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ScenarioError(path, message)


# --------------------------------------------------------------------------- loading

def parse_scenario(data: Any, *, default_name: str = "scenario", base_dir: Path | None = None,
                   traffic_flows: dict | None = None) -> Scenario:
    """Validate already-parsed YAML data into a Scenario (raises ScenarioError). `base_dir`:
    the folder graph and traffic files resolve against (and `traffic_flows` their counts, when
    already known); a graph file is read here only when failure names must be checked
    against it."""
    if data is None:
        raise ScenarioError("", "the file is empty; a scenario needs at least a 'workload'")
    if not isinstance(data, dict):
        raise ScenarioError(
            "", f"expected a mapping of fields at the top level, got {type(data).__name__}"
        )
    _check_values(data)
    data = dict(data)
    data.setdefault("name", default_name)
    try:
        scenario = Scenario.model_validate(data)
    except pydantic.ValidationError as err:
        raise _format_validation_error(err) from None
    scenario.located(base_dir, traffic_flows)
    check_fabric(scenario.fabric)
    check_workload(scenario)
    check_sections(scenario)
    check_timed_failures(scenario)
    if scenario.failures is not None:
        check_failures(scenario)
    return scenario


class SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that (1) reports a bad scalar (`2024-13-45`, `!!int abc`) as a
    ConstructorError at its line, not a bare ValueError/KeyError/AttributeError; (2) reads
    YAML 1.2 floats such as `1e-4` as numbers (YAML 1.1 wants `1.0e-4`); (3) refuses a key given
    twice in one mapping instead of silently keeping the last."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):  # else the base class raises its own error
            seen = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {_short(key_node.value)} appears twice in one mapping",
                        key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)

    def flatten_mapping(self, node):
        # PyYAML copies every merged (`<<`) key into the mapping, recursively: nested merges
        # through aliases grow exponentially before any validation could refuse them
        super().flatten_mapping(node)
        if len(node.value) > MAX_MERGED_KEYS:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) expand one mapping to more than "
                f"{MAX_MERGED_KEYS:,} keys", node.start_mark)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as err:  # PyYAML's scalar constructors raise bare Python errors
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_short(node.value)} as {node.tag}: {err}",
                node.start_mark) from None


# YAML 1.1 reads `3:1` as the base-60 integer 181 (and `1:30.5` as a float): a scenario's
# `oversubscription: 3:1` must stay the ratio it says, as in YAML 1.2, which has no base 60
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
def _without_base_60(tag: str, regexp: re.Pattern) -> re.Pattern:
    """`regexp` of an int or float resolver, refusing the base-60 forms."""
    if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        return regexp
    return re.compile(rf"(?!{_SEXAGESIMAL.pattern}){regexp.pattern}", regexp.flags)


SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, _without_base_60(tag, regexp)) for tag, regexp in resolvers]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def read_yaml(path: str | Path, what: str = "scenario") -> Any:
    """The YAML data of the file at `path`; every failure is a ScenarioError naming it."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError("", "no such file", source) from None
    except IsADirectoryError:
        raise ScenarioError("", f"is a directory, expected a YAML {what} file", source) from None
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror}", source) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError("", f"is not UTF-8 text; expected a YAML {what} file",
                            source) from None
    try:
        return yaml.load(text, Loader=SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "unparseable"
        raise ScenarioError("", f"is not valid YAML ({problem}{where})", source) from None
    except RecursionError:
        raise ScenarioError("", f"is nested too deeply to be a {what}", source) from None


def _located_scenario(data: Any, path: Path) -> Scenario:
    source = str(path)
    try:
        scenario = parse_scenario(data, default_name=path.stem, base_dir=path.parent)
    except ScenarioError as err:
        raise err.with_source(source) from None
    try:
        if scenario.fabric.kind == FabricKind.GRAPH:   # read (and checked) before anything runs
            build(scenario)
        counts = traffic_flow_counts(scenario)
    except ScenarioError as err:
        raise err.with_source(source) from None
    return scenario.located(path.parent, counts)


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and validate a scenario file; every failure is a ScenarioError."""
    return _located_scenario(read_yaml(path), Path(path))


DESIGN_FIELD = "design"


def load_design(path: str | Path) -> tuple[Scenario, DesignConfig]:
    """Read a design file: an ordinary scenario (validated as `load_scenario` does) plus a
    `design` section (a `DesignConfig`); every failure is a ScenarioError."""
    path = Path(path)
    data = read_yaml(path, "design")
    if not isinstance(data, dict) or DESIGN_FIELD not in data:
        raise ScenarioError(DESIGN_FIELD, "required field is missing; a design file is a "
                            "scenario plus a 'design' section (space, target, objective)",
                            str(path))
    data = dict(data)
    try:
        spec = parse_design(data.pop(DESIGN_FIELD))
        data["fabric"] = design_base_fabric(data.get("fabric"))
    except ScenarioError as err:
        raise err.with_source(str(path)) from None
    return _located_scenario(data, path), spec


# the fabric fields each design of a search sets for itself (`design.space`, `nic_gbps`)
DESIGN_OWNED = ("kind", "tiers", "planes", "port_gbps", "radix", "oversubscription", "file",
                "format", "paths")


def design_base_fabric(fabric: Any) -> dict:
    """A design file's `fabric` section made a valid placeholder: what every design shares
    (GPUs, servers, scale-up, paths) as written, and a single-plane two-tier Clos just big
    enough for the GPUs in place of what the space sets. ScenarioError naming a field the
    space owns, if the file sets one."""
    if fabric is None:
        fabric = {}
    if not isinstance(fabric, dict):
        raise ScenarioError("fabric", f"expected a mapping of fields (got {_short(fabric)})")
    for name in DESIGN_OWNED:
        if name in fabric:
            raise ScenarioError(f"fabric.{name}", "is set by each design of the search "
                                "(design.space, design.nic_gbps, design.paths); allowed in "
                                "a design file's fabric: the fields every design shares, e.g. "
                                "gpus, gpus_per_server, scaleup_gbps, rail_optimised")
    gpus = fabric.get("gpus", 1024)
    radix = 4
    while isinstance(gpus, int) and radix * (radix // 2) < gpus and radix < 4096:
        radix += 2
    return {**fabric, "planes": 1, "radix": max(radix, 64)}


def parse_design(section: Any) -> DesignConfig:
    """Validate a `design` section's data (raises ScenarioError naming `design.<field>`)."""
    if isinstance(section, DesignConfig):
        return section
    if not isinstance(section, dict):
        raise ScenarioError(DESIGN_FIELD, "expected a mapping of fields, e.g. {target: "
                            f"{{max: 1.05}}}} (got {_short(section)})")
    _check_values(section)
    try:
        return DesignConfig.model_validate(section)
    except pydantic.ValidationError as err:
        raise _format_validation_error(err, DesignConfig, (DESIGN_FIELD,)) from None


def input_files(scenario: Scenario) -> dict[str, Path]:
    """{field: path} of every file the scenario reads besides itself (a graph file, traffic
    files), resolved against its folder; only paths inside the folder (the others are refused
    when the scenario is built)."""
    folder = (scenario.base_dir or Path(".")).resolve()
    named = {}
    if scenario.fabric.kind == FabricKind.GRAPH and scenario.fabric.file:
        named["fabric.file"] = scenario.fabric.file
    for section, i, item in scenario.items:
        if isinstance(item, TrafficConfig):
            named[f"{section}[{i}].file"] = item.file
    out = {}
    for field, name in named.items():
        path = (folder / name).resolve()
        if folder in path.parents:
            out[field] = path
    return out


def result_config(scenario: Scenario) -> dict:
    """The validated scenario as JSON data, every default filled in, as a stream header
    records it: `failures.chunk` left out (it never changes a result), and under `files` the
    SHA-256 of every file the scenario reads, so an edited traffic or graph file is caught
    like an edited scenario."""
    data = check_sections(scenario).model_dump(mode="json", exclude={"failures": {"chunk"}})
    files = {}
    for field, path in input_files(scenario).items():
        try:
            files[field] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            files[field] = None
    if files:
        data["files"] = files
    return data


def with_overrides(scenario: Scenario, **fields: Any) -> Scenario:
    """A copy with top-level fields replaced (command-line overrides win over the file)."""
    data = scenario.model_dump()
    data.update({k: v for k, v in fields.items() if v is not None})
    return parse_scenario(data, base_dir=scenario.base_dir,
                          traffic_flows=scenario.traffic_flows)




# --------------------------------------------------------------------------- dotted paths

# `name` then any `[i]`, joined by dots: fabric.planes, workload[0].size, failures.links.random
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH_RE = re.compile(rf"^{_NAME}(?:\[[0-9]+\])*(?:\.{_NAME}(?:\[[0-9]+\])*)*$")
_PART_RE = re.compile(rf"({_NAME})|\[([0-9]+)\]")


def split_path(path: str, field: str) -> tuple[str | int, ...]:
    """The parts of a dotted field path (``workload[0].size`` -> ("workload", 0, "size"));
    ScenarioError(`field`) when it is not one."""
    if not isinstance(path, str) or not _PATH_RE.match(path):
        raise ScenarioError(field, f"{short_repr(path)} is not a field path; expected names "
                            "joined by dots, with [i] for list items, e.g. fabric.planes or "
                            "workload[0].size")
    return tuple(name if name else int(index) for name, index in _PART_RE.findall(path))


def _model_loc(data: dict, parts: tuple) -> tuple:
    """The loc `allowed_fields` walks for `parts`: a union's tag (a workload item or job's
    collective, the fabric's kind) inserted where pydantic puts it."""
    loc: list = []
    node: Any = data
    at, tag, default = _UNIONS.get(parts[0], (None, None, None)) if parts else (None,) * 3
    for i, part in enumerate(parts):
        loc.append(part)
        node = node[part] if isinstance(node, (dict, list)) else None
        if at is not None and i == at - 1 and isinstance(node, dict):
            loc.append(node.get(tag, default))
    return tuple(loc)


def dotted(parts: tuple) -> str:
    """The dotted path of `parts` (the inverse of `split_path`)."""
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if k else "") + p
                   for k, p in enumerate(parts))


def assign_path(data: dict, parts: tuple, value: Any, field: str) -> None:
    """data[parts...] = value in a scenario's dump, creating an optional section (failures,
    reliability, ...) that the dump holds as None or lacks; ScenarioError(`field`) for a
    path the scenario does not have."""
    node: Any = data
    for depth, part in enumerate(parts):
        where = dotted(parts[:depth]) or "the scenario"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ScenarioError(field, f"{where} is not a list; [{part}] indexes lists")
            if part >= len(node):
                allowed = f"[0]..[{len(node) - 1}]" if node else "none (the list is empty)"
                raise ScenarioError(field, f"{where} has {len(node)} item(s); allowed: "
                                    f"{allowed}")
        elif isinstance(node, list):
            raise ScenarioError(field, f"{where} is a list; pick an item first, e.g. "
                                f"{where}[0].{part}")
        elif not isinstance(node, dict):
            raise ScenarioError(field, f"{where} is a value, not a section with fields")
        elif part not in node:
            allowed = allowed_fields(_model_loc(data, parts[:depth]))
            if not allowed or part not in allowed:
                message = f"unknown field {part!r}"
                if allowed:
                    message += f" in {where}; allowed: {', '.join(allowed)}"
                raise ScenarioError(field, message)
            node[part] = None
        if depth == len(parts) - 1:
            node[part] = value
            return
        if node[part] is None and isinstance(parts[depth + 1], str):
            node[part] = {}     # an optional section the base leaves out: its defaults apply
        node = node[part]


def traffic_key(scenario: Scenario) -> tuple:
    """What the flow counts of traffic items and Chakra traces depend on: the file or folder,
    its format or groups, the job's GPUs (a new value of these re-reads the files)."""
    return (scenario.fabric.gpus,
            tuple((s, i, item.file, item.format, str(item.gpus)) for s, i, item in scenario.items
                  if isinstance(item, TrafficConfig)),
            tuple((s, i, item.folder, item.comm_groups, str(item.gpus))
                  for s, i, item in scenario.items if isinstance(item, ChakraConfig)))


def with_paths(scenario: Scenario, values: dict[str, Any]) -> Scenario:
    """A validated copy of `scenario` with each dotted field path of `values` set (``{
    "fabric.planes": 4, "workload[0].size": "1GiB"}``; values as YAML would read them). A
    bad path or value is a ScenarioError naming the path as given."""
    data = scenario.model_dump()
    for path, value in values.items():
        assign_path(data, split_path(path, str(path)), value, path)
    updated = parse_scenario(data, default_name=scenario.name, base_dir=scenario.base_dir)
    counts = (scenario.traffic_flows if traffic_key(updated) == traffic_key(scenario)
              else traffic_flow_counts(updated))
    return updated.located(scenario.base_dir, counts)
