"""Fuzzing the front door: hostile scenario files through the real `fabricjax` command.

Contract (cli/main.py): whatever the file, a run ends in exit 0 with a complete, strictly
parseable JSON report, or exit 2 with exactly one `error:` line on stderr that names the file
or the field. Never a traceback, exit 1 or a hang; never a half-written report or a leftover
temporary file (`.*.tmp`); a refused run leaves an existing report byte-identical; a YAML tag
never runs anything. test_scenario.py fuzzes `load_scenario` and test_cli.py runs fixed bad
files; this file drives the command itself with generated files and options.

Layers:
- quick (the normal suite): in-process through typer's CliRunner, derandomized. Valid files
  are analysed only on a small pool of precompiled shapes with `--policy ecmp|spray`; any other
  valid file runs `topo` (the same loader) so that the subset stays well under a minute.
- subprocess: a few generated cases through `python -m fabricjax_cli.main` (the real exit path of
  `main()`) under a CPU-time limit; the bomb reproducers also under an address-space cap.
- long: the same properties with many examples, fresh draws each run, valid files analysed
  up to an estimated cost (a 131,072-GPU ecmp permutation included); the subprocess layer
  scales to N/100 fresh examples. About 2 minutes per 1,000 examples on a 2-core CPU:

      FABRICJAX_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -q tests/test_fuzz.py \
          --hypothesis-show-statistics

  (`-m slow -k long` runs only the in-process long fuzzer.)

  Add `--hypothesis-seed=N` to replay a run; a failure prints its `@reproduce_failure` blob.
  FABRICJAX_FUZZ_LOG=PATH appends one line per case (exit code, seconds, route) to PATH.
  Valid cases that were not analysed, or ran over budget, are reported as FuzzBudgetWarning.
- found bugs: one explicit reproducer each (test_bug_*), xfail(strict=True) while its id is
  in OPEN_BUGS (the fuzzers then avoid its trigger); a plain regression test once fixed.

No hypothesis database is used (database=None): runs write nothing into the tree.

Every limit here is CPU seconds of the process that does the work (this one in-process: an
ITIMER_PROF timer; a child: its RLIMIT_CPU), never wall-clock seconds, so a machine busy
with other jobs cannot fail a case; a child that uses no CPU for HANG_GUARD_S of wall time
(blocked forever) is stopped as a hang.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from typer.testing import CliRunner

from fabricjax.core.errors import ScenarioError, one_line
from fabricjax.config import Scenario, job_size, two_tier_ports
from fabricjax.core.registry import sections
from fabricjax.scenario import design_base_fabric, load_scenario, with_overrides

REPO = Path(__file__).resolve().parents[1]

# Bugs this file found, each with a reproducer below (test_bug_*). OPEN_BUGS lists those not
# fixed yet: their reproducers are xfail(strict=True) and the generators avoid their triggers,
# so the fuzzers keep hunting for new ones. Delete an id from OPEN_BUGS once it is fixed.
FOUND_BUGS = {
    "alias-bomb": "an error message repr()s the whole offending value (scenario._short, "
                  "units._short): a billion-laughs alias bomb expands exponentially",
    "merge-bomb": "nested YAML merge keys (<<) through aliases flatten exponentially inside "
                  "the loader (PyYAML's flatten_mapping) before any validation",
    "raw-key": "_field_path joins the user's keys unescaped: a key holding a newline, U+2028 "
               "or ESC splits the one error line (or injects a terminal escape)",
    "surrogate-name": "a lone surrogate in a name (YAML \"\\ud800\") passes validation and "
                      "crashes printing to stdout: exit 1 after the JSON was written",
    "raw-path": "the scenario path is printed unescaped: a file name holding a newline "
                "gives a two-line error",
    "failure-set-memory": "memory.estimate_memory counts a fixed 6 kB per failure set, whatever "
                          "its size: sets of 10^6 components are accepted under --max-memory "
                          "and then run out of memory (exit 1)",
    "json-trailing-slash": "typer turns --json into a Path, which drops a trailing slash, so "
                           "check_writable never sees it: `--json newdir/` writes a file "
                           "named newdir",
}
OPEN_BUGS: set[str] = set()

FUZZ_EXAMPLES = int(os.environ.get("FABRICJAX_FUZZ_EXAMPLES", "0") or 0)
QUICK_EXAMPLES = 150
SUBPROCESS_EXAMPLES = 8
BOMB_MEMORY = 2 * 2**30   # RLIMIT_AS of the bomb reproducers: they fail, the machine survives
BOMB_CPU_S = 20          # CPU seconds per bomb: a refusal takes about one
HANG_GUARD_S = 900       # wall seconds after which a child is a hang (it is blocked, not slow)

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much a mode may spend per case, in CPU seconds. A file the loader refuses must be
    refused within `refused_limit_s`, or it is a hang (a failure). A valid run is abandoned at
    `valid_limit_s`; that, and a valid run that used more than `valid_budget_s`, is recorded
    as a FuzzBudgetWarning, not failed: nothing refuses a scenario for taking long. Valid scenarios
    estimated above `max_work` (see _work) run `topo` instead of `analyze`; with `pool_only`,
    only the precompiled pool is analysed."""

    name: str
    refused_limit_s: float
    valid_limit_s: float
    valid_budget_s: float
    max_work: float
    pool_only: bool


QUICK = Budget("quick", refused_limit_s=20, valid_limit_s=120, valid_budget_s=30,
               max_work=0, pool_only=True)
LONG = Budget("long", refused_limit_s=60, valid_limit_s=300, valid_budget_s=60,
              max_work=2**23, pool_only=False)


# --------------------------------------------------------------------------- base scenarios

# The quick subset analyses only these fabrics (gpus, planes, radix, port_gbps,
# oversubscription), every job the whole fabric, ecmp with 1 QP or spray with 8 or 128 EVs:
# five compiled shapes in all, a few seconds each, shared by every example.
POOL_A = {"gpus": 16, "planes": 2, "radix": 8}
POOL_B = {"gpus": 64, "planes": 2, "radix": 16}
POOL_FABRICS = {(16, 2, 8, 100.0, 1.0), (64, 2, 16, 100.0, 1.0)}


def _scenario_files() -> list[dict]:
    # a design file (`fabricjax design`) is a scenario plus a `design` section the scenario
    # loader refuses; its scenario part is fuzzed as the bundled scenarios are
    files = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "scenarios").glob("*.yaml"))]
    return [data if "design" not in data else
            {**{k: v for k, v in data.items() if k != "design"},
             "fabric": design_base_fabric(data.get("fabric"))} for data in files]


# Valid scenarios to mutate: the pool (most examples), the tests' valid dicts (test_scenario's
# planted-junk base, test_cli's failure scenario) and every bundled scenario.
BASES: list[dict] = [
    {"name": "pool-a", "seed": 3, "fabric": dict(POOL_A),
     "workload": [{"name": "perm", "collective": "permutation", "size": "4MB"},
                  {"name": "ring", "collective": "all-reduce", "size": "16MB",
                   "order": "random"}],
     "policies": ["ecmp", "spray"]},
    {"fabric": dict(POOL_A), "workload": [{"collective": "permutation"}],
     "policies": ["ecmp"]},
    {"fabric": dict(POOL_B),
     "workload": [{"collective": "permutation", "shift": 1},
                  {"collective": "all-reduce", "order": "linear", "algorithm": "ring"}],
     "policies": ["ecmp", "spray"], "ecmp": {"qps": 1}, "spray": {"evs": 8},
     "solver": {"eps": 0.0, "max_rounds": 2000, "step_latency_us": 0}},
    {"name": "every-section", "seed": 1, "fabric": {**POOL_A, "kind": "multiplane-clos",
                                                    "port_gbps": "100G", "tiers": 2,
                                                    "oversubscription": 1},
     "workload": [{"collective": "permutation", "size": "1GiB", "gpus": "all"}],
     "policies": ["spray"], "ecmp": {"qps": 1}, "spray": {"evs": 128},
     "mrc": {"evs": 16, "threshold": 1.0, "damping": 0.3, "max_iters": 30, "tol": 0.01,
             "patience": 5},
     "optimal": {"max_iters": 300, "tol": 0.001},
     "solver": {"eps": 0.01, "max_rounds": 2000, "step_latency_us": 0},
     "reliability": {"link_failures_per_hour": 1.0e-4, "switch_failures_per_hour": 0,
                     "nic_port_failures_per_hour": 0, "step_time_s": 2.0, "hours": 24}},
    {"fabric": {"gpus": 64, "planes": 2, "radix": 16},
     "workload": [{"collective": "permutation", "shift": 1},
                  {"collective": "all-reduce", "order": "linear", "gpus": [0, 1, 2]}],
     "policies": ["ecmp", "spray"], "ecmp": {"qps": 1}, "spray": {"evs": 8},
     "solver": {"eps": 0.0}},
    {"fabric": {"gpus": 64, "planes": 2, "radix": 16}, "seed": 5,
     "workload": [{"name": "perm", "collective": "permutation", "size": "4MB"}],
     "policies": ["ecmp", "mrc"], "mrc": {"evs": 16, "max_iters": 30, "patience": 5},
     "failures": {"samples": 3, "links": {"random": 2}, "nic_ports": ["plane1/gpu9"]},
     "reliability": {"link_failures_per_hour": 1.0e-4}},
    {"fabric": dict(POOL_A), "seed": 2,
     "workload": [{"collective": "permutation", "size": "4MB"},
                  {"collective": "all-reduce", "gpus": 4, "size": "8MB"}],
     "policies": ["ecmp", "spray", "mrc", "optimal"], "spray": {"evs": 8},
     "mrc": {"evs": 8, "threshold": 1.0, "damping": 0.3, "max_iters": 20, "tol": 0.01,
             "patience": 5},
     "optimal": {"max_iters": 200, "tol": 0.001},
     "failures": {"samples": 2, "seed": 1,
                  "links": {"names": ["plane0/t0-0/up0"], "random": 1, "probability": 0.0},
                  "switches": {"names": [], "random": 0, "probability": 0.0, "tier": "t1"},
                  "nic_ports": {"names": [], "random": 1, "probability": 0.0},
                  "planes": {"names": [], "random": 0, "probability": 0.0},
                  "degraded": {"names": [], "random": 1, "probability": 0.0, "factor": 0.5},
                  "reconvergence_s": 5, "transport_timeout_s": 30, "mrc_reaction_us": 50,
                  "restart_s": 600, "chunk": 1},
     "reliability": {"link_failures_per_hour": 1.0e-5, "switch_failures_per_hour": 2.0e-6,
                     "nic_port_failures_per_hour": 1.0e-5, "step_time_s": 2.0, "hours": 24}},
    *_scenario_files(),
]
POOL_BASES = 3   # BASES[:3] stay in the pool under benign mutations
EXTREME_BASES = [0, 1, 2, 3, 5, 6]   # small enough to analyse with extreme valid values

# Enormous fabrics: the int32 link-id limit, the two-tier reach, radix and plane bounds.
ENORMOUS_FABRICS = [
    {"gpus": 131072, "planes": 8, "radix": 512},
    {"gpus": 131072, "planes": 64, "radix": 4096},
    {"gpus": 4194304, "planes": 1, "radix": 4096},
    {"gpus": 8386560, "planes": 64, "radix": 4096},   # just under 2^31 - 1 directed links
    {"gpus": 8388608, "planes": 64, "radix": 4096},   # exactly 2^31: refused (int32)
    {"gpus": 8388609, "planes": 1, "radix": 4096},    # beyond two-tier reach
    {"gpus": 10**7, "planes": 65, "radix": 4098},
    {"gpus": 2, "planes": 64, "radix": 4096},
    {"gpus": 2**31, "planes": 64, "radix": 4096},
]


# --------------------------------------------------------------------------- hostile values

def _schema_bounds() -> dict[str, set]:
    """Every numeric bound of the schema by field name (ge/le/gt/lt/min_length), collected
    from the pydantic models so new fields are fuzzed at their edges automatically."""
    bounds: dict[str, set] = {}
    seen: set = set()

    def walk(model) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            for meta in field.metadata:
                for attr in ("ge", "le", "gt", "lt", "min_length", "max_length"):
                    value = getattr(meta, attr, None)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        bounds.setdefault(name, set()).add(value)
            for arg in _model_args(field.annotation):
                walk(arg)

    walk(Scenario)
    for section in sections().values():     # the policies' sections, from their registry
        walk(section)
    return bounds


def _model_args(annotation) -> list:
    import typing

    from pydantic import BaseModel

    found, stack = [], [annotation]
    while stack:
        node = stack.pop()
        if isinstance(node, type) and issubclass(node, BaseModel):
            found.append(node)
        stack.extend(typing.get_args(node))
    return found


def _edges(bound) -> list:
    if isinstance(bound, int):
        return [bound - 1, bound, bound + 1, -bound, bound * 1000, float(bound)]
    return [bound, math.nextafter(bound, math.inf), math.nextafter(bound, -math.inf), -bound,
            bound * 10, str(bound)]


SCHEMA_BOUNDS = _schema_bounds()
EDGE_VALUES = sorted({repr(v): v for b in SCHEMA_BOUNDS.values() for x in b
                      for v in _edges(x)}.values(), key=repr)

_SPECIAL_NUMBERS = [0, -1, 1, 2, 3, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63, -2**63 - 1,
                    10**30 + 1, 10**400, -10**400, 0.0, -0.0, 5e-324, 1e-308, 1e308,
                    math.inf, -math.inf, math.nan, 0.5, 1.5, 131072, 4096, 4098]
_SPECIAL_STRINGS = [
    "all", "ALL", "none", "", " ", "1GiB", "-4MB", "0", "0B", "5XB", "1e400GB", "nanGB",
    "infG", "100G", "1.6T", "800Gbps", "0x10", "1_000MB", "\u0661\u0662MB", "1e-400",
    "[/x]", "[bold red]x", ":smile:", "yes", "no", "on", "null", "~", "2024-01-02",
    "plane0/t0-0/up0", "plane1/gpu9", "plane0/t1-0", "plane0", "plane99999999999999999999",
    "ecmp", "spray", "mrc", "optimal", "permutation", "all-reduce", "linear", "random", "ring",
    "tree", "t0", "t1", "any", "multiplane-clos", "fat-tree", "x" * 2000, "\t", "\u200b",
    "\ufeff", "\u202e", "\U0001f600", "a\nb", "a\rb", "\x00", "\x7f",
]
# Line breaks and control characters in *keys* hit the known "raw-key" bug.
_KEY_SAFE = st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"),
                          exclude_characters="\x85")
_KEY_ANY = st.characters(exclude_categories=("Cs",))
_KNOWN_KEYS = ["name", "seed", "fabric", "workload", "policies", "ecmp", "spray", "mrc",
               "optimal", "solver", "failures", "reliability", "gpus", "planes", "radix",
               "port_gbps", "oversubscription", "kind", "tiers", "collective", "size", "shift",
               "order", "algorithm", "qps", "evs", "threshold", "damping", "max_iters", "tol",
               "patience", "eps", "max_rounds", "step_latency_us", "samples", "links",
               "switches", "nic_ports", "planes", "degraded", "names", "random", "probability",
               "tier", "factor", "reconvergence_s", "transport_timeout_s", "mrc_reaction_us",
               "restart_s", "chunk", "link_failures_per_hour", "step_time_s", "hours",
               "Name", "GPUS", "size ", "<<", "__class__", "model_config"]


def _keys() -> st.SearchStrategy:
    alphabet = _KEY_SAFE if "raw-key" in OPEN_BUGS else _KEY_ANY
    return st.one_of(st.sampled_from(_KNOWN_KEYS), st.text(alphabet, max_size=8),
                     st.integers(-3, 3), st.none(), st.booleans(), st.floats(-2, 2))


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(_SPECIAL_NUMBERS),
    st.sampled_from(EDGE_VALUES), st.floats(), st.sampled_from(_SPECIAL_STRINGS),
    st.text(max_size=12), st.binary(max_size=8), st.dates(),
    st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 1, 1)),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_keys(), inner, max_size=4)),
    max_leaves=10,
)

# Benign values per field: valid alternatives that keep a pool scenario in the pool, so that
# many examples exercise the whole run and its report with unusual but legal numbers.
_BENIGN = {
    "name": st.one_of(st.text(_KEY_SAFE, max_size=30),
                      st.sampled_from(["[/bold]x", "[red]r[/red]", ":smile:", "\u202eevil",
                                       "x" * 500, "", "\U0001f600" * 3, "\u200b"])),
    "seed": st.sampled_from([0, 1, 7, 2**31 - 1, 123456789]),
    "size": st.sampled_from([1, 2, "1B", "4MB", "1GiB", 2**60, "1.5e3KB", 1e-0, 7.5, "1TiB",
                             " 8 MiB "]),
    "order": st.sampled_from(["linear", "random"]),
    "shift": st.sampled_from([1, -1, 3, 17, 10**30 + 1, -(10**30) - 1, 2**63 + 1]),
    "eps": st.sampled_from([0, 0.0, 0.5, 1e-9, 0.25]),
    "max_rounds": st.sampled_from([1, 2, 10**6]),
    "step_latency_us": st.sampled_from([0, 1e6, 0.5, 1e-300]),
    "qps": st.just(1),
    "policies": st.sampled_from([["ecmp"], ["spray"], ["spray", "ecmp"], ["ecmp", "spray"]]),
    "algorithm": st.just("ring"),
    "hours": st.sampled_from([1e-6, 24, 1e6]),
    "link_failures_per_hour": st.sampled_from([0, 1.0, 1e-300]),
    "step_time_s": st.sampled_from([None, 1e-9, 1e6]),
    "switch_failures_per_hour": st.sampled_from([0, 1.0, 5e-324]),
    "nic_port_failures_per_hour": st.sampled_from([0, 1.0]),
    "port_gbps": st.sampled_from(["1M", 1e-3, 1e5, "100T", 0.5]),
    "oversubscription": st.sampled_from([1, 3, 1.0]),
    "threshold": st.sampled_from([1e-9, 5e-324, 0.5, 1.0, 100.0]),
    "damping": st.sampled_from([5e-324, 1e-300, 1.0]),
    "max_iters": st.sampled_from([1, 2, 50]),
    "tol": st.sampled_from([0, 1.0, 1e-300, 0.5]),
    "patience": st.sampled_from([1, 100_000]),
    "evs": st.sampled_from([2, 4, 16, 4096]),
    "samples": st.sampled_from([1, 2, 3]),
    "random": st.sampled_from([0, 1, 2, 3]),
    "probability": st.sampled_from([0, 1.0, 0.5, 5e-324, 0.999999]),
    "factor": st.sampled_from([5e-324, 1e-300, 0.999999, 0.5]),
    "tier": st.sampled_from(["t0", "t1", "any"]),
    "reconvergence_s": st.sampled_from([0, 1e6, 5e-324]),
    "transport_timeout_s": st.sampled_from([5e-324, 1e-9, 1e6]),
    "mrc_reaction_us": st.sampled_from([0, 1e12]),
    "restart_s": st.sampled_from([0, 1e7]),
    "chunk": st.sampled_from([1, 2, 1_000_000]),
}

# Raw YAML spliced in place of a value: tags that build objects, aliases and anchors,
# directives, bad scalars, deep nesting. {MARKER} becomes a path that must never appear.
_RAW_FRAGMENTS = [
    "!!python/object/apply:os.system ['touch {MARKER}']",
    "!!python/object/new:os.system ['touch {MARKER}']",
    "!!python/object/apply:subprocess.check_output [[touch, {MARKER}]]",
    "!<tag:yaml.org,2002:python/object/apply:os.system> ['touch {MARKER}']",
    "!!python/name:os.system", "!!python/module:os", "!!python/object:collections.OrderedDict {}",
    "!!python/tuple [1, 2]", "!!python/bytes AAAA", "!!python/complex 1+2j", "!!python/none ''",
    "!!set {a, b}", "!!omap [{a: 1}, {b: 2}]", "!!pairs [[a, 1]]", "!!binary aGVsbG8=",
    "!!binary '!!!'", "!!timestamp 2001-02-30", "!!timestamp x", "!!int abc", "!!int 0x_",
    "!!float abc", "!!bool maybe", "!!null x", "!!str 5", "!!map [1]", "!!seq {a: 1}",
    "!!set .", "!local {a: 1}", "!<!> x", "!!merge x", "*undefined", "&a [*a]",
    "&d {x: *d}", "&s x", "{<<: {gpus: 16}}", "{<<: [*undefined]}", "{<<: 5}",
    "{? [1, 2] : 3}", "{? {a: 1} : 2}", "[1, 2", "{a: 1", "'unterminated", '"\\x"',
    '"\\u0000"', '"\\N\\_\\L\\P"', "1:30", "0o17", "012", "+12", "0b101", "1_000",
    ".inf", "-.inf", ".nan", ".NaN", "1e400", "-1e400", "1.0e+400", "0x7fffffffffffffff",
    "2024-13-45", "2024-01-02T03:04:05Z", "yes", "No", "~", "''", "|\n  x", ">-",
    "%YAML 1.1", "--- x", "...", "- x", "? x", "@x", "`x", "!", "!!", "{{}}", "[[]]",
    '"' + "\\t" * 100 + '"', "[" + ", ".join(["0"] * 5000) + "]",
]
_RAW_TOP_LINES = [
    "bogus: 1", "? [a, b]\n: 1", "<<: {seed: 5}", "<<: *undefined", "1: 2", "null: 3",
    "true: 4", "~: x", "'': 1", "fabric: {}", "workload: []", "%YAML 1.1", "---\nother: 1",
    "...", "---", "# just a comment", "\t", "policies: [ecmp, ecmp]", "name: !!binary aGk=",
    "seed: !!python/object/apply:os.system ['touch {MARKER}']",
    "&top seed: 1", "*alias: 1", " name: indented", "- not a mapping", "\x00", "\ufeffname: x",
]
if "raw-key" not in OPEN_BUGS:
    _RAW_TOP_LINES += ['"a\\nb": 1', '"\\e[31mred": 1', '"\\u2028": 1']
if "surrogate-name" not in OPEN_BUGS:
    _RAW_TOP_LINES += ['name: "\\ud800"', 'name: "a\\udcffb"']


def _deep(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "dict":
        return "{a: " * depth + "1" + "}" * depth
    if kind == "mixed":
        return "[{a: " * (depth // 2) + "1" + "}]" * (depth // 2)
    return "[" * depth   # unclosed


def _laughs(depth: int, width: int) -> str:
    """A billion-laughs list: width**depth leaves behind depth anchors."""
    text = "&l0 [lol, lol]"
    for k in range(1, depth + 1):
        text = f"&l{k} [{', '.join([text] + [f'*l{k - 1}'] * (width - 1))}]"
    return text


def _merge_bomb(depth: int, width: int) -> str:
    """Merge keys through aliases: PyYAML flattens 2 * width**depth key entries."""
    text = "&m0 {a: 1, b: 2}"
    for k in range(1, depth + 1):
        text = f"&m{k} {{<<: [{', '.join([text] + [f'*m{k - 1}'] * (width - 1))}]}}"
    return text


@st.composite
def _raw_fragment(draw) -> str:
    kind = draw(st.sampled_from(["fragment", "fragment", "deep", "laughs", "merge"]))
    if kind == "fragment":
        return draw(st.sampled_from(_RAW_FRAGMENTS))
    if kind == "deep":
        depth = draw(st.sampled_from([10, 100, 500, 999, 1000, 1001, 3000, 10_000]))
        return _deep(depth, draw(st.sampled_from(["list", "dict", "mixed", "open"])))
    # In-process the expansion must stay small: repr() of a real bomb cannot be interrupted
    # and would take the test machine's memory (the real ones run in a subprocess, below).
    depth = draw(st.integers(1, 4))
    width = draw(st.integers(2, 8))
    return _laughs(depth, width) if kind == "laughs" else _merge_bomb(depth, width)


# --------------------------------------------------------------------------- mutations

def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


def _parent(data, path):
    node = data
    for part in path[:-1]:
        node = node[part]
    return node


def _set(data, path, value):
    if not path:
        return value
    _parent(data, path)[path[-1]] = value
    return data


def _delete(data, path):
    if path:
        del _parent(data, path)[path[-1]]
    return data


def _get(data, path):
    node = data
    for part in path:
        node = node[part]
    return node


def _clone(value):
    return json.loads(json.dumps(value)) if _jsonable(value) else yaml.safe_load(
        yaml.safe_dump(value))


def _jsonable(value) -> bool:
    try:
        json.dumps(value, allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


_SENTINEL = "__FUZZ_RAW_{}__"


@st.composite
def _mutate(draw, data, benign_only: bool):
    """One structural mutation of `data` (a dict tree), returning the new tree. Raw YAML
    fragments are planted as sentinels and spliced in after serialization."""
    paths = list(_paths(data))
    path = draw(st.sampled_from(paths))
    leaf = path[-1] if path and isinstance(path[-1], str) else None
    if benign_only:
        benign = [p for p in paths if p and isinstance(p[-1], str) and p[-1] in _BENIGN]
        if not benign:
            return data
        path = draw(st.sampled_from(benign))
        # a copy: sampled_from hands out its own list objects, and a later in-place
        # mutation of the tree must not change them (hypothesis: FlakyStrategyDefinition)
        return _set(data, path, copy.deepcopy(draw(_BENIGN[path[-1]])))
    op = draw(st.sampled_from(["replace", "replace", "edge", "edge", "delete", "insert",
                               "wrap", "retype", "duplicate", "move", "raw", "raw", "benign",
                               "derived"]))
    if op == "replace":
        return _set(data, path, draw(_VALUES))
    if op == "edge":
        bounds = SCHEMA_BOUNDS.get(leaf) if leaf else None
        values = [v for b in bounds for v in _edges(b)] if bounds else _SPECIAL_NUMBERS
        return _set(data, path, copy.deepcopy(draw(st.sampled_from(values))))
    if op == "delete":
        return _delete(data, path) if path else data
    if op == "insert":
        target = _get(data, path)
        if isinstance(target, dict):
            target[draw(_keys())] = draw(_VALUES)
        elif isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(_VALUES))
        return data
    if op == "wrap":
        node = _get(data, path)
        return _set(data, path, draw(st.sampled_from([[node], {"x": node}, {leaf or "k": node},
                                                      [node, node]])))
    if op == "retype":
        node = _get(data, path)
        if isinstance(node, dict):
            new = (list(node.values()) if draw(st.booleans())
                   else [[k, v] for k, v in node.items()])
        elif isinstance(node, list):
            new = {i: v for i, v in enumerate(node)} if draw(st.booleans()) else tuple(node)
        elif isinstance(node, bool):
            new = int(node)
        elif isinstance(node, (int, float)):
            new = draw(st.sampled_from([str(node), float(node) if abs(node) < 1e300 else 0.5,
                                        [node], {"value": node}, node != 0]))
        elif isinstance(node, str):
            new = draw(st.sampled_from([node.upper(), node + " ", [node], node * 3,
                                        len(node), None]))
        else:
            new = str(node)
        return _set(data, path, list(new) if isinstance(new, tuple) else new)
    if op == "duplicate":
        node = _get(data, path)
        if isinstance(node, list) and node:
            node.append(_clone(node[draw(st.integers(0, len(node) - 1))]))
        elif path and isinstance(_parent(data, path), list):
            _parent(data, path).append(_clone(node))
        return data
    if op == "move":
        other = draw(st.sampled_from(paths))
        if not path or not other or path[:len(other)] == other or other[:len(path)] == path:
            return data
        a, b = _get(data, path), _get(data, other)
        _set(data, path, b)
        return _set(data, other, a)
    if op == "raw":
        sentinel = _SENTINEL.format(len(_raw_plants))
        _raw_plants.append((sentinel, draw(_raw_fragment())))
        return _set(data, path, sentinel)
    if op == "benign":
        return draw(_mutate(data, benign_only=True))
    # derived: edges that depend on other fields (two-tier reach, shift multiples, EVs per
    # plane, the int32 link limit)
    fabric = data.get("fabric") if isinstance(data, dict) else None
    if not isinstance(fabric, dict):
        return data
    radix = fabric.get("radix", 64) if isinstance(fabric.get("radix", 64), int) else 64
    planes = fabric.get("planes", 8) if isinstance(fabric.get("planes", 8), int) else 8
    gpus = fabric.get("gpus", 1024) if isinstance(fabric.get("gpus", 1024), int) else 1024
    gpus = min(max(gpus, 0), 2**17)   # lists of GPU ids below stay a readable size
    reach = radix * (radix // 2)
    choice = draw(st.sampled_from(["reach", "shift", "evs", "links", "list"]))
    delta = draw(st.sampled_from([-1, 0, 1]))
    if choice == "reach":
        fabric["gpus"] = max(reach + delta, 0)
    elif choice == "shift" and isinstance(data.get("workload"), list) and data["workload"]:
        item = data["workload"][0]
        if isinstance(item, dict):
            item["shift"] = gpus * draw(st.integers(-3, 3)) + delta
    elif choice == "evs":
        data[draw(st.sampled_from(["spray", "mrc"]))] = {"evs": planes * draw(
            st.integers(0, 4)) + delta}
    elif choice == "links":
        fabric.update(radix=4096, planes=64, gpus=8388608 + 2048 * delta)
    elif isinstance(data.get("workload"), list) and data["workload"]:
        item = data["workload"][0]
        if isinstance(item, dict):
            item["gpus"] = draw(st.sampled_from([
                list(range(gpus)), list(range(gpus + delta)), [0, gpus - 1], [0, gpus],
                [0, 0], [1], [], [-1, 1], list(range(gpus))[::-1], [True, False]]))
    return data


_raw_plants: list[tuple[str, str]] = []   # filled while drawing one case, then spliced


def _dump(data, style: str, allow_unicode: bool) -> str:
    if style == "json":
        try:
            return json.dumps(data, default=str, ensure_ascii=not allow_unicode)
        except (TypeError, ValueError):
            style = "block"
    try:
        return yaml.safe_dump(data, default_flow_style=(style == "flow"), sort_keys=False,
                              allow_unicode=allow_unicode, width=10**6)
    except (yaml.YAMLError, RecursionError, TypeError):
        return repr(data)   # still a hostile file


def _splice(text: str, plants: list[tuple[str, str]], marker: str) -> str:
    for sentinel, fragment in plants:
        fragment = fragment.replace("{MARKER}", marker)
        text = text.replace(f'"{sentinel}"', fragment).replace(sentinel, fragment)
    return text


_EDIT_CHARS = [":", "-", "[", "{", "}", "]", "'", '"', "&", "*", "!", "#", "\x00", "\x7f",
               "\ufeff", "\\", "|", ">", "%", "@", "\t", " "]
if "raw-key" not in OPEN_BUGS:
    _EDIT_CHARS += ["\u2028", "\x85"]


@st.composite
def _text_edit(draw, text: str) -> str:
    """Line and character edits after serialization: duplicate keys, bad indentation, tabs,
    truncation, raw lines."""
    lines = text.split("\n")
    op = draw(st.sampled_from(["dup-line", "drop-line", "swap", "indent", "dedent", "tab",
                               "truncate", "top-line", "top-line", "crlf", "cr", "char"]))
    i = draw(st.integers(0, max(len(lines) - 1, 0)))
    if op == "dup-line":
        lines.insert(i, lines[i])
    elif op == "drop-line" and len(lines) > 1:
        del lines[i]
    elif op == "swap" and len(lines) > 1:
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "indent":
        lines[i] = "  " + lines[i]
    elif op == "dedent":
        lines[i] = lines[i].lstrip()
    elif op == "tab":
        lines[i] = "\t" + lines[i]
    elif op == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    elif op == "top-line":
        lines.insert(draw(st.sampled_from([0, len(lines)])), draw(st.sampled_from(_RAW_TOP_LINES)))
    elif op == "crlf":
        return "\r\n".join(lines)
    elif op == "cr":
        return "\r".join(lines)
    elif op == "char" and text:
        k = draw(st.integers(0, len(text) - 1))
        return text[:k] + draw(st.sampled_from(_EDIT_CHARS)) + text[k:]
    return "\n".join(lines)


@st.composite
def _encode(draw, text: str) -> bytes:
    how = draw(st.sampled_from(["utf-8"] * 10 + ["utf-8-sig", "utf-16", "utf-32", "latin-1",
                                                  "cp1252", "flip", "insert", "nul"]))
    if how in ("utf-8", "utf-8-sig", "utf-16", "utf-32"):
        return text.encode(how, "surrogatepass")
    if how in ("latin-1", "cp1252"):
        return (text + "\nname: café\n").encode(how, "replace")
    raw = text.encode("utf-8", "surrogatepass")
    k = draw(st.integers(0, len(raw)))
    if how == "flip" and raw:
        k = min(k, len(raw) - 1)
        return raw[:k] + bytes([raw[k] ^ draw(st.sampled_from([0x80, 0xff, 0x40]))]) + raw[k + 1:]
    if how == "nul":
        return raw[:k] + b"\x00" + raw[k:]
    return raw[:k] + draw(st.binary(min_size=1, max_size=4)) + raw[k:]


@st.composite
def _mutated_file(draw, pool: bool, extreme: bool = False) -> tuple[str, bytes]:
    """A bundled or test scenario, mutated as a tree, then as text, then as bytes. `pool`:
    one of the pool bases, mostly with valid changes only; `extreme`: a small base with 1-6
    valid but extreme values (the path to a complete report, where NaNs would show)."""
    _raw_plants.clear()
    if extreme:
        index = draw(st.sampled_from(EXTREME_BASES))
    else:
        index = draw(st.integers(0, (POOL_BASES if pool else len(BASES)) - 1))
    data = _clone(BASES[index])
    benign = extreme or (pool and draw(st.integers(0, 3)) > 0)   # pool cases: mostly valid
    for _ in range(draw(st.integers(1 if extreme else 0 if benign else 1,
                                    6 if extreme else 3))):
        data = draw(_mutate(data, benign_only=benign))
    style = draw(st.sampled_from(["block", "block", "flow", "json"]))
    text = _dump(data, style, allow_unicode=draw(st.booleans()))
    text = _splice(text, list(_raw_plants), "{MARKER}")
    if not benign:
        for _ in range(draw(st.integers(0, 2))):
            text = draw(_text_edit(text))
    if "surrogate-name" in OPEN_BUGS:
        text = re.sub(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}", "x", text)
    content = draw(_encode(text)) if not benign else text.encode("utf-8")
    label = f"base{index}{'-extreme' if extreme else '-benign' if benign else ''}-{style}"
    return label, content


@st.composite
def _structural_file(draw) -> tuple[str, bytes]:
    """A small valid scenario with one raw fragment (tag, alias, nesting) at a chosen slot."""
    slot = draw(st.sampled_from(["name: {}", "seed: {}", "fabric: {}", "fabric: {{gpus: {}}}",
                                 "workload: {}", "workload: [{}]",
                                 "workload: [{{collective: permutation, gpus: {}}}]",
                                 "workload: [{{collective: permutation, size: {}}}]",
                                 "policies: {}", "policies: [{}]", "solver: {}",
                                 "failures: {{links: {}}}", "failures: {{links: {{names: {}}}}}",
                                 "bogus: {}", "{}"]))
    fragment = draw(_raw_fragment())
    head = "fabric: {gpus: 16, planes: 2, radix: 8}\nworkload: [{collective: permutation}]\n"
    line = slot.format(fragment)
    keys = {"fabric", "workload"} & {line.split(":", 1)[0]}
    body = "".join(h + "\n" for h in head.splitlines() if h.split(":", 1)[0] not in keys)
    text = draw(st.sampled_from([body + line + "\n", line + "\n" + body]))
    return f"structural:{fragment[:30]!r}", draw(_encode(text))


@st.composite
def _enormous_file(draw) -> tuple[str, bytes]:
    fabric = dict(draw(st.sampled_from(ENORMOUS_FABRICS)))
    data = {"fabric": fabric,
            "workload": [draw(st.sampled_from([
                {"collective": "permutation"}, {"collective": "all-reduce", "order": "random"},
                {"collective": "permutation", "gpus": 2},
                {"collective": "all-reduce", "gpus": list(range(0, 4096, 2))}]))],
            "policies": draw(st.sampled_from([["ecmp"], ["spray"], ["mrc"], ["optimal"],
                                              ["ecmp", "spray", "mrc", "optimal"]]))}
    for section, field, values in (("ecmp", "qps", [1, 1024]), ("spray", "evs", [64, 4096]),
                                   ("mrc", "evs", [64, 4096])):
        if draw(st.booleans()):
            data[section] = {field: draw(st.sampled_from(values))}
    if draw(st.integers(0, 3)) == 0:
        data["failures"] = draw(st.sampled_from([
            {"samples": 1_000_000, "links": 1}, {"samples": 2, "planes": {"probability": 1.0}},
            {"links": {"random": 1_000_000}}, {"chunk": 1_000_000, "samples": 10, "links": 1}]))
    return f"enormous:{fabric}", yaml.safe_dump(data, sort_keys=False).encode()


_BYTES_FILE = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\n", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00" * 64, b"---\n---\n",
                     b"%YAML 1.2\n---\nfabric: {}\n", b"%TAG ! tag:evil.com,2000:\n--- !x 1\n",
                     "fabric: {gpus: 16}\n".encode("utf-16-le"),
                     b"workload: [{collective: permutation}]\n" + b"x" * 100_000,
                     b"workload: [{collective: permutation}]\n"
                     + b"".join(b"k%d: 1\n" % i for i in range(10_000)),
                     b"workload:\n" + b"".join(b"  - {collective: permutation}\n"
                                               for _ in range(2000))]),
).map(lambda content: ("bytes", content))


# --------------------------------------------------------------------------- cases

@dataclasses.dataclass(frozen=True)
class Case:
    """One run of the command: the file, its name, the options and the output setting.
    json_target: report (out/report.json), none, dir (out/), missing-dir, scenario (the input
    itself), new-dir (out/newdir/). existing: bytes already at out/report.json, or None."""

    family: str
    content: bytes
    filename: str
    command: str
    policies: tuple[str, ...] | None
    seed: int | None
    samples: int | None
    chunk: int | None
    max_memory: str | None
    device: str | None
    trace: bool
    quiet: bool
    json_target: str
    existing: bytes | None

    def __repr__(self) -> str:
        shown = self.content[:300]
        more = f" ... ({len(self.content):,} bytes)" if len(self.content) > 300 else ""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name not in ("content", "existing")}
        existing = None if self.existing is None else self.existing[:40]
        return f"Case(content={shown!r}{more}, existing={existing!r}, {fields})"


_FILENAMES = ["scenario.yaml", "scenario.yaml", "scenario.yaml", "s p a c e.yaml",
              "[red]x[blink].yaml", "ünïcödé.yaml", "x.yml", "noext", ".hidden.yaml",
              "-starts-with-dash.yaml", "a" * 200 + ".yaml"]
if "raw-path" not in OPEN_BUGS:
    _FILENAMES += ["new\nline.yaml", "esc\x1b[31m.yaml"]


_JSON_TARGETS = ["report"] * 7 + ["none", "dir", "missing-dir", "scenario"]
if "json-trailing-slash" not in OPEN_BUGS:
    _JSON_TARGETS.append("new-dir")


@st.composite
def cases(draw, budget: Budget) -> Case:
    family = draw(st.sampled_from(["pool", "pool", "pool", "extreme", "mutated", "mutated",
                                   "mutated", "structural", "structural", "bytes", "enormous"]))
    if family == "pool":
        label, content = draw(_mutated_file(pool=True))
    elif family == "extreme":
        label, content = draw(_mutated_file(pool=False, extreme=True))
    elif family == "mutated":
        label, content = draw(_mutated_file(pool=False))
    elif family == "structural":
        label, content = draw(_structural_file())
    elif family == "bytes":
        label, content = draw(_BYTES_FILE)
    else:
        label, content = draw(_enormous_file())
    hostile_options = draw(st.integers(0, 9)) == 0
    if budget.pool_only:
        policies = draw(st.sampled_from([("ecmp",), ("spray",), ("ecmp", "spray"), None]))
    else:
        policies = draw(st.sampled_from([("ecmp",), ("spray",), ("mrc",), ("optimal",),
                                         ("ecmp", "spray"), None]))
    seed = samples = chunk = max_memory = device = None
    if hostile_options:
        which = draw(st.sampled_from(["policy", "seed", "samples", "chunk", "memory",
                                      "device"]))
        if which == "policy":
            policies = draw(st.sampled_from([("bogus",), ("ecmp", "ecmp"), ("ECMP",), ("",),
                                             ("spray", "[/x]")]))
        elif which == "seed":
            seed = draw(st.sampled_from([-1, 2**31, 10**30, -(10**30)]))
        elif which == "samples":
            samples = draw(st.sampled_from([0, -1, 1, 2, 10**7]))
        elif which == "chunk":
            chunk = draw(st.sampled_from([0, -1, 1, 10**7]))
        elif which == "memory":
            max_memory = draw(st.sampled_from(["0", "-1GB", "abc", "1e400", "1B", "1GiB",
                                               "[/x]", "", "16EiB"]))
        else:
            device = draw(st.sampled_from(["tpu", "", "GPU", "cpu0"]))
    elif draw(st.integers(0, 4)) == 0:
        seed = draw(st.integers(0, 2**31 - 1))
    json_target = draw(st.sampled_from(_JSON_TARGETS))
    existing = draw(st.one_of(st.none(), st.none(), st.sampled_from([
        b"old report\n", b'{"old": true}\n', b"", b"\xff\xfe binary \x00"])))
    return Case(
        family=label, content=content, filename=draw(st.sampled_from(_FILENAMES)),
        command=draw(st.sampled_from(["analyze"] * 6 + ["topo"])), policies=policies,
        seed=seed, samples=samples, chunk=chunk, max_memory=max_memory, device=device,
        trace=draw(st.integers(0, 9)) == 0, quiet=draw(st.integers(0, 5)) > 0,
        json_target=json_target, existing=existing)


# --------------------------------------------------------------------------- running a case

@dataclasses.dataclass
class Outcome:
    code: int | None        # None: it ran past its CPU-time limit (or hung)
    stdout: str
    stderr: str
    crash: str | None       # an exception that escaped the command (in-process)
    elapsed: float          # CPU seconds of the work (this process's, or the child's)


class CaseTimeout(BaseException):
    """Raised by SIGPROF in the middle of a case. A BaseException, so that no `except
    Exception` in the code under test can swallow it."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    # CPU seconds of this process (every thread): interrupts Python code (the YAML reader,
    # validation) that has used that much; waiting on a loaded machine costs nothing.
    def fire(signum, frame):
        raise CaseTimeout(f"used {seconds:g} CPU s")

    previous = signal.signal(signal.SIGPROF, fire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


_RUNNER = CliRunner()


def _invoke_in_process(args: list[str], limit: float) -> Outcome:
    from fabricjax_cli.main import app

    start = time.process_time()
    try:
        with _time_limit(limit):
            result = _RUNNER.invoke(app, args, catch_exceptions=True)
    except CaseTimeout:
        return Outcome(None, "", "", None, time.process_time() - start)
    elapsed = time.process_time() - start
    error = result.exception
    if error is None:
        return Outcome(result.exit_code, result.stdout, result.stderr, None, elapsed)
    if isinstance(error, SystemExit) and error.code in (0, 2):
        return Outcome(error.code, result.stdout, result.stderr, None, elapsed)
    crash = "".join(traceback.format_exception(error))
    return Outcome(result.exit_code, result.stdout, result.stderr, crash, elapsed)


def _subprocess_env() -> dict:
    env = dict(os.environ)
    for name in ("FABRICJAX_DEBUG", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# `python -m fabricjax_cli.main ARGS` under a CPU-time limit and optionally an address-space
# cap, both set in the child itself (a preexec_fn would fork the multithreaded test process).
_CAPPED = ("import resource, runpy, sys; cpu = int(sys.argv.pop(1)); "
           "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5)); "
           "cap = int(sys.argv.pop(1)); "
           "cap and resource.setrlimit(resource.RLIMIT_AS, (cap, cap)); "
           "runpy.run_module('fabricjax_cli.main', run_name='__main__', alter_sys=True)")


def _command(args: list[str], cpu_s: float, memory: int | None = None) -> list[str]:
    return [sys.executable, "-c", _CAPPED, str(max(int(math.ceil(cpu_s)), 1)),
            str(memory or 0), *args]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _code(returncode: int) -> int | None:
    """The exit code, None for a child stopped at its CPU-time limit (SIGXCPU, or SIGKILL at
    the hard limit)."""
    return None if returncode in (-signal.SIGXCPU, -signal.SIGKILL) else returncode


def _invoke_subprocess(args: list[str], limit: float, cwd: Path,
                       memory: int | None = None) -> Outcome:
    """`args` in a child limited to `limit` CPU seconds; elapsed: the child's CPU seconds."""
    start = _children_cpu()
    try:
        proc = subprocess.run(_command(args, limit, memory), cwd=cwd, env=_subprocess_env(),
                              capture_output=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        return Outcome(None, "", "", None, _children_cpu() - start)
    return Outcome(_code(proc.returncode), proc.stdout.decode("utf-8", "backslashreplace"),
                   proc.stderr.decode("utf-8", "backslashreplace"), None,
                   _children_cpu() - start)


def _args(case: Case, command: str, scenario: Path, out: Path) -> list[str]:
    args = [command, str(scenario)]
    if command == "analyze":
        for policy in case.policies or ():
            args += ["--policy", policy]
        for option, value in (("--seed", case.seed), ("--samples", case.samples),
                              ("--chunk", case.chunk), ("--max-memory", case.max_memory),
                              ("--device", case.device)):
            if value is not None:
                args += [option, str(value)]
        args += ["--trace"] * case.trace + ["-q"] * case.quiet
    target = {"report": out / "report.json", "none": None, "dir": str(out) + os.sep,
              "missing-dir": out / "missing" / "report.json", "scenario": scenario,
              "new-dir": str(out / "newdir") + os.sep}
    if target[case.json_target] is not None:
        args += ["--json", str(target[case.json_target])]
    return args


def _effective(scenario: Path, case: Case, command: str) -> Scenario | None:
    """The config the command would run, or None where it must refuse the file or the
    overrides (what cli.main does, through the same library calls)."""
    try:
        config = load_scenario(scenario)
        if command == "topo":
            return config
        config = with_overrides(config, policies=list(case.policies) if case.policies else None,
                                seed=case.seed)
        given = {k: v for k, v in (("samples", case.samples), ("chunk", case.chunk))
                 if v is not None}
        if given:
            if config.failures is None:
                return None
            config = with_overrides(config, failures={**config.failures.model_dump(), **given})
        return config
    except ScenarioError:
        return None


def _work(config: Scenario) -> float:
    """A rough cost of analysing `config` (for routing, not a model): per policy and failure
    set, flow-slot-iterations plus one pass over the fabric's directed links."""
    fabric = config.fabric
    down, up = two_tier_ports(fabric)
    links = 2 * fabric.planes * (fabric.gpus + -(-fabric.gpus // down) * up)
    flows = sum(job_size(item, fabric.gpus) for item in config.workload)
    per_policy = {"ecmp": config.ecmp.qps * fabric.planes, "spray": config.spray.evs,
                  "mrc": config.mrc.evs * config.mrc.max_iters,
                  "optimal": fabric.planes * up * config.optimal.max_iters}
    sets, failed = 1, 0
    if config.failures is not None:
        sets += config.failures.num_samples
        failed = sum(k.random + len(k.names) for k in config.failures.kinds.values())
    return sets * sum(flows * per_policy[p] + links + failed for p in config.policies)


def _in_pool(config: Scenario) -> bool:
    fabric = config.fabric
    key = (fabric.gpus, fabric.planes, fabric.radix, fabric.port_gbps, fabric.oversubscription)
    if key not in POOL_FABRICS or config.failures is not None or len(config.workload) > 4:
        return False
    if any(job_size(item, fabric.gpus) != fabric.gpus for item in config.workload):
        return False
    allowed = {"ecmp": config.ecmp.qps == 1, "spray": config.spray.evs in (8, 128)}
    return all(allowed.get(policy, False) for policy in config.policies)


def _memory_refusal(config: Scenario, case: Case) -> bool:
    """True where the command's memory check will surely refuse (a cheap exit 2)."""
    try:
        from fabricjax.engine.plan import available_memory, estimate_memory
        from fabricjax.core.units import parse_size
    except ImportError:
        return False
    if case.max_memory is not None:
        try:
            return estimate_memory(config).total > parse_size(case.max_memory)
        except ValueError:
            return True   # a bad --max-memory is refused before anything runs
    available = available_memory()
    return available is not None and estimate_memory(config).total > 2 * available


def _route(config: Scenario | None, case: Case, budget: Budget) -> tuple[str, str]:
    """(command, why): the drawn command, or `topo` for a valid scenario too costly here."""
    if case.command == "topo" or config is None:
        return case.command, "as drawn"
    if case.device is not None or _memory_refusal(config, case):
        return "analyze", "refused by an option or the memory check"
    if budget.pool_only:
        return ("analyze", "pool") if _in_pool(config) else ("topo", "valid, not in the pool")
    work = _work(config)
    if work <= budget.max_work:
        return "analyze", "affordable"
    warnings.warn(f"fuzz[{budget.name}]: valid scenario estimated at {work:.3g} flow-slot-"
                  f"iterations ran `topo` instead of `analyze` (over {budget.max_work:.3g})",
                  FuzzBudgetWarning, stacklevel=2)
    return "topo", "valid, over the work budget"


class FuzzBudgetWarning(UserWarning):
    """A valid case that was not analysed, or was analysed slower than the mode's budget."""


# --------------------------------------------------------------------------- the contract

_LINE_BREAKS = re.compile(r"[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
_FIELD_LINE = re.compile(r"^error: (?:--[a-z-]+|[A-Za-z_]+(?:\[\d+\])*(?:\.[A-Za-z_]+"
                         r"(?:\[\d+\])*)*)[: ]")


def assert_one_error_line(stderr: str, scenario: Path, detail: str) -> str:
    assert stderr.endswith("\n"), detail
    line = stderr[:-1]
    assert line and not _LINE_BREAKS.search(line), f"not exactly one line\n{detail}"
    assert "\x1b" not in line, f"a terminal escape reached stderr\n{detail}"
    assert "Traceback" not in line, detail
    assert line.startswith("error: "), detail
    assert line.startswith(f"error: {one_line(str(scenario))}: ") or _FIELD_LINE.match(line), (
        f"names neither the file nor a field/option\n{detail}")
    return line


def _strict_float(text: str) -> float:
    value = float(text)
    assert math.isfinite(value), f"non-finite number {text} in a report"
    return value


def _reject_constant(name: str):
    raise AssertionError(f"non-finite constant {name} in a report")


def load_report(data: bytes) -> dict:
    report = json.loads(data.decode("utf-8"), parse_float=_strict_float,
                        parse_constant=_reject_constant)
    assert isinstance(report, dict)
    return report


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


def _log(budget: Budget, outcome: Outcome, command: str, why: str, case: Case) -> None:
    """One line per case to $FABRICJAX_FUZZ_LOG, if set: progress of a long run."""
    path = os.environ.get("FABRICJAX_FUZZ_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} {budget.name} exit={outcome.code} "
                         f"{outcome.elapsed:7.2f}s {command} ({why}) {case.family[:60]!r} "
                         f"{len(case.content)}B\n")


def _record(statistic: str, detail: str | None = None) -> None:
    """hypothesis statistics and notes, where a test is drawing (explicit cases run bare)."""
    if currently_in_test_context():
        event(statistic)
        if detail is not None:
            note(detail)


def check_front_door(case: Case, budget: Budget, *, in_process: bool = True) -> Outcome:
    """Run `case` through the command and check the whole contract."""
    with tempfile.TemporaryDirectory(prefix="fabricjax-fuzz-") as tmp:
        root = Path(tmp)
        out = root / "out"
        out.mkdir()
        marker = root / "MARKER"
        content = case.content.replace(b"{MARKER}", str(marker).encode())
        scenario = root / case.filename
        scenario.write_bytes(content)
        if case.existing is not None:
            (out / "report.json").write_bytes(case.existing)
        (out / "keep.txt").write_bytes(b"an unrelated file\n")
        before = _snapshot(out)

        try:
            with _time_limit(budget.refused_limit_s):
                config = _effective(scenario, case, case.command)
        except CaseTimeout:
            pytest.fail(f"loading the scenario used {budget.refused_limit_s:g} CPU s (a hang)")
        command, why = _route(config, case, budget)
        if command != case.command:
            config = _effective(scenario, case, command)
        args = _args(case, command, scenario, out)
        _record(f"{case.family.split(':')[0].split('-')[0]}: {command} ({why})",
                f"args: {args!r}")
        limit = budget.valid_limit_s if config is not None else budget.refused_limit_s
        if in_process:
            outcome = _invoke_in_process(args, limit)
        else:
            outcome = _invoke_subprocess(args, limit, cwd=root)
        detail = (f"args={args!r}\nexit={outcome.code} after {outcome.elapsed:.1f} CPU s\n"
                  f"stdout (tail)={outcome.stdout[-600:]!r}\nstderr={outcome.stderr[:2000]!r}\n"
                  f"{outcome.crash or ''}")
        _record(f"exit {outcome.code}")

        _log(budget, outcome, command, why, case)
        if outcome.code is None and config is not None:
            # A valid scenario that is merely slow: record it (the memory estimate refuses
            # what would not fit; nothing yet refuses what would take too long).
            warnings.warn(f"fuzz[{budget.name}]: valid case abandoned after {limit:g} CPU s: "
                          f"{args!r}", FuzzBudgetWarning)
            _record("valid, abandoned at the time limit")
            if in_process:   # interrupted like Ctrl-C: still nothing half-written (a
                # killed subprocess cannot clean up, so only the in-process run is checked)
                assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")], detail
                report = (out / "report.json").read_bytes() if (
                    out / "report.json").exists() else None
                if report is not None and report != case.existing:
                    load_report(report)
            return outcome
        assert outcome.code is not None, f"used {limit:g} CPU s (a hang)\n{detail}"
        assert outcome.crash is None, f"an exception escaped the command\n{detail}"
        assert outcome.code in (0, 2), f"exit {outcome.code}: neither a result nor a refusal\n" \
                                       f"{detail}"
        assert "Traceback" not in outcome.stdout + outcome.stderr, detail
        assert not marker.exists(), f"a YAML tag ran a command\n{detail}"
        assert scenario.read_bytes() == content, f"the input scenario changed\n{detail}"
        leftovers = [str(p) for p in root.rglob("*") if p.name.endswith(".tmp")]
        assert not leftovers, f"temporary files left behind: {leftovers}\n{detail}"
        assert sorted(p.name for p in root.iterdir()) == sorted([case.filename, "out"]), detail
        after = _snapshot(out)

        if outcome.code == 2:
            assert_one_error_line(outcome.stderr, scenario, detail)
            assert outcome.stdout == "", f"a refusal printed to stdout\n{detail}"
            assert after == before, f"a refused run changed the output folder\n{detail}"
            return outcome

        assert config is not None, f"exit 0 on a file the loader refuses\n{detail}"
        written = "report.json" if case.json_target == "report" else None
        for name, data in before.items():
            if name != written:
                assert after.get(name) == data, f"{name} changed\n{detail}"
        assert set(after) - set(before) <= {"report.json"}, detail
        if written is None:
            assert after == before, detail
        else:
            report = load_report(after["report.json"])
            if command == "topo":
                assert report.get("gpus") == config.fabric.gpus, detail
            else:
                assert {"scenario", "seed", "versions", "fabric", "results"} <= set(report)
                assert report["seed"] == config.seed, detail
                records = report["results"]
                assert len(records) == len(config.policies) * len(config.workload), detail
                assert {r["policy"] for r in records} == set(config.policies), detail
        if command == "analyze" and outcome.elapsed > budget.valid_budget_s:
            warnings.warn(f"fuzz[{budget.name}]: valid case took {outcome.elapsed:.0f} CPU s "
                          f"(budget {budget.valid_budget_s:g} s): {args!r}", FuzzBudgetWarning)
        return outcome


# --------------------------------------------------------------------------- the fuzzers

@settings(max_examples=QUICK_EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=_HEALTH, print_blob=True)
@given(cases(QUICK))
def test_front_door_quick(case):
    check_front_door(case, QUICK)


@pytest.mark.slow
@pytest.mark.skipif(FUZZ_EXAMPLES <= 0, reason="set FABRICJAX_FUZZ_EXAMPLES=N to run N "
                    "fresh examples (see the module docstring)")
@settings(max_examples=max(FUZZ_EXAMPLES, 1), derandomize=False, database=None, deadline=None,
          suppress_health_check=_HEALTH, print_blob=True)
@given(cases(LONG))
def test_front_door_long(case):
    check_front_door(case, LONG)


@settings(max_examples=max(SUBPROCESS_EXAMPLES, FUZZ_EXAMPLES // 100),
          derandomize=FUZZ_EXAMPLES <= 0, database=None, deadline=None,
          suppress_health_check=_HEALTH, print_blob=True)
@given(cases(QUICK))
def test_front_door_subprocess(case):
    """The real process: `main()`'s exit path, stderr as a terminal gets it."""
    check_front_door(case, QUICK, in_process=False)


# --------------------------------------------------------------------------- explicit cases

def _case(content: bytes | str, **fields) -> Case:
    defaults = dict(family="explicit", filename="scenario.yaml", command="analyze",
                    policies=("ecmp",), seed=None, samples=None, chunk=None, max_memory=None,
                    device=None, trace=False, quiet=True, json_target="report",
                    existing=b"old report\n")
    defaults.update(fields)
    if isinstance(content, str):
        content = content.encode()
    return Case(content=content, **defaults)


TINY = "fabric: {gpus: 16, planes: 2, radix: 8}\nworkload: [{collective: permutation}]\n"


@pytest.mark.parametrize("content", [
    TINY + "name: !!python/object/apply:os.system ['touch {MARKER}']\n",
    "fabric: !!python/object/new:os.system ['touch {MARKER}']\n" + TINY.split("\n", 1)[1],
    TINY + "name: !!python/name:os.system\n",
    TINY + "name: " + "[" * 10_000 + "]" * 10_000 + "\n",
    TINY + "name: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
    TINY + "name: " + _laughs(3, 10) + "\n",      # 1,000 leaves (the real bombs: test_bug_*)
    TINY + "name: &a [*a]\n",                      # a list that contains itself
    (TINY + "name: café\n").encode("latin-1"),
    "fabric: {gpus: 131072, planes: 64, radix: 4096}\nworkload: [{collective: permutation}]\n"
    "ecmp: {qps: 1024}\n",
], ids=["apply-tag", "new-tag", "name-tag", "deep-list-10k", "deep-dict-10k", "mild-laughs",
        "self-alias", "latin-1", "enormous-refused"])
def test_hostile_file_through_the_real_process(content):
    outcome = check_front_door(_case(content, max_memory="8GiB"), QUICK, in_process=False)
    assert outcome.code == 2


def test_enormous_fabric_is_refused_naming_the_estimate():
    """131,072 GPUs x 64 planes x 1,024 QPs: refused before anything is allocated."""
    case = _case("fabric: {gpus: 131072, planes: 64, radix: 4096}\n"
                 "workload: [{collective: permutation}]\necmp: {qps: 1024}\n",
                 max_memory="8GiB")
    outcome = check_front_door(case, QUICK)
    assert outcome.code == 2 and "memory" in outcome.stderr, outcome.stderr
    assert outcome.elapsed < 10, f"{outcome.elapsed:.1f} CPU s to refuse it"


def test_valid_run_replaces_an_existing_report_atomically():
    outcome = check_front_door(_case(TINY + "name: 'ok [/bold]'\n"), QUICK)
    assert outcome.code == 0, outcome.stderr


# --------------------------------------------------------------------------- found bugs

def _found(bug: str):
    """xfail(strict) while `bug` is open; a plain regression test once it is fixed."""
    return pytest.mark.xfail(bug in OPEN_BUGS, reason=FOUND_BUGS[bug], strict=True)


def _bomb_text(slot: str) -> str:
    if slot == "merge":
        return TINY + "solver: " + _merge_bomb(8, 10) + "\n"
    head = "fabric: {gpus: 16, planes: 2, radix: 8}\n"
    body = slot.format(_laughs(10, 10))
    if "workload" not in slot:
        body += "workload: [{collective: permutation}]\n"
    return head + body


_LAUGH_SLOTS = {
    "name": "name: {}\n",                                              # scenario._short
    "gpus-validator": "workload: [{{collective: permutation, gpus: {}}}]\n",   # _gpus
    "size-validator": "workload: [{{collective: permutation, size: {}}}]\n",   # units
}


@pytest.fixture(scope="module")
def bomb_outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Every bomb through the real process at once (a hang costs one limit, not four), each
    under an address-space cap and BOMB_CPU_S CPU seconds (elapsed: all four children's CPU
    seconds together)."""
    root = tmp_path_factory.mktemp("bombs")
    slots = {**_LAUGH_SLOTS, "merge": "merge"}
    running = {}
    start = _children_cpu()
    for name, slot in slots.items():
        (root / f"{name}.yaml").write_text(_bomb_text(slot))
        running[name] = subprocess.Popen(
            _command(["analyze", f"{name}.yaml", "-q"], BOMB_CPU_S, BOMB_MEMORY), cwd=root,
            env=_subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    outcomes = {}
    for name, proc in running.items():
        try:
            stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            outcomes[name] = Outcome(None, "", "", None, _children_cpu() - start)
            continue
        outcomes[name] = Outcome(_code(proc.returncode),
                                 stdout.decode("utf-8", "backslashreplace"),
                                 stderr.decode("utf-8", "backslashreplace"), None,
                                 _children_cpu() - start)
    return outcomes


def _assert_refused(outcome: Outcome, source: str) -> None:
    detail = (f"exit {outcome.code} after {outcome.elapsed:.1f} CPU s: "
              f"{outcome.stderr[:300]!r}")
    assert outcome.code == 2, detail
    assert_one_error_line(outcome.stderr, Path(source), detail)


@_found("alias-bomb")
@pytest.mark.parametrize("slot", list(_LAUGH_SLOTS))
def test_bug_billion_laughs(bomb_outcomes, slot):
    """10 anchors of 10 aliases each: 10^10 leaves if anything walks the value; the loader
    itself shares them. Reproducer, in any typed field:
    `name: &l10 [&l9 [... &l0 [lol, lol], *l0, ... (x9)], ..., *l9 (x9)]`."""
    _assert_refused(bomb_outcomes[slot], f"{slot}.yaml")


@_found("merge-bomb")
def test_bug_merge_key_bomb(bomb_outcomes):
    """Reproducer: `solver: &m8 {<<: [&m7 {<<: [... &m0 {a: 1, b: 2}, *m0 (x9)]}, *m7 (x9)]}`
    (2 x 10^8 merged keys; plain yaml.SafeLoader does the same)."""
    _assert_refused(bomb_outcomes["merge"], "merge.yaml")


@_found("raw-key")
@pytest.mark.parametrize("key", ["a\\nb", "a\\u2028b", "\\e[31mred"],
                         ids=["newline", "line-separator", "escape"])
def test_bug_raw_key_in_the_error_line(key):
    """Reproducer: `fabric: {gpus: 16, planes: 2, radix: 8, "a\\nb": 1}` prints
    `error: ...: fabric.a` and `b: unknown field 'a\\nb'` on two lines."""
    content = TINY.replace("radix: 8", f'radix: 8, "{key}": 1')
    outcome = check_front_door(_case(content), QUICK)
    assert outcome.code == 2


@_found("raw-path")
@pytest.mark.parametrize("content", [None, TINY + "bogus: 1\n"], ids=["missing", "bad-field"])
def test_bug_newline_in_the_scenario_path(content):
    """Reproducer: `fabricjax analyze $'a\\nb.yaml'` prints `error: a` / `b.yaml: no such
    file`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "new\nline.yaml"
        if content is not None:
            path.write_text(content)
        outcome = _invoke_in_process(["analyze", str(path), "-q"], 20)
        assert outcome.code == 2 and outcome.crash is None
        assert_one_error_line(outcome.stderr, path, repr(outcome.stderr))


@_found("surrogate-name")
@pytest.mark.parametrize("content", [
    TINY + 'name: "a\\ud800b"\n',
    TINY.replace("permutation}", 'permutation, name: "\\ud800"}'),
], ids=["scenario-name", "workload-name"])
def test_bug_lone_surrogate_in_a_name(content):
    """Reproducer: `name: "a\\ud800b"` in a valid scenario: the JSON is written, then printing
    the header raises UnicodeEncodeError: `internal error`, exit 1 (two lines with Python's
    PYTHONIOENCODING hint). In-process stdout is strict UTF-8, as in a UTF-8 locale."""
    outcome = check_front_door(_case(content), QUICK)
    assert outcome.code in (0, 2)


@_found("json-trailing-slash")
@pytest.mark.parametrize("command", ["topo", "analyze"])
def test_bug_json_path_naming_a_new_folder(command, tmp_path):
    """Reproducer: `fabricjax topo s.yaml --json newdir/` exits 0 and writes the file
    `newdir`; a trailing slash names a folder (output.check_writable refuses it, if it saw
    it)."""
    (tmp_path / "s.yaml").write_text(TINY)
    args = [command, str(tmp_path / "s.yaml"), "--json", f"{tmp_path}/newdir/"]
    outcome = _invoke_in_process(args + (["-q", "-p", "ecmp"] if command == "analyze" else []),
                                 60)
    assert outcome.code == 2, f"exit {outcome.code}; wrote {sorted(os.listdir(tmp_path))}"
    assert_one_error_line(outcome.stderr, tmp_path / "s.yaml", outcome.stderr)
    assert sorted(os.listdir(tmp_path)) == ["s.yaml"]


@pytest.mark.slow
@_found("failure-set-memory")
def test_bug_memory_estimate_ignores_failure_set_size(tmp_path):
    """Reproducer (about 90 s): estimated at 0.91 GiB, so `--max-memory 1GiB` accepts it; it
    peaks at 2.3 GiB RSS and writes a 162 MB report (every set lists 10^6 cables). Under a
    3 GiB address-space cap: `internal error: MemoryError`, exit 1. On the 4,194,304-GPU
    fabric (radix 4096, 1 plane) with the default 100 sets the estimate is 2.3 GiB and the run
    passed 15 GiB after 14 minutes."""
    (tmp_path / "big.yaml").write_text(
        "fabric: {gpus: 131072, planes: 8, radix: 512}\n"
        "workload: [{collective: permutation, gpus: 2}]\n"
        "failures: {samples: 4, links: {random: 1000000}}\n")
    outcome = _invoke_subprocess(
        ["analyze", "big.yaml", "-q", "-p", "ecmp", "--max-memory", "1GiB", "--json",
         "out.json"], limit=400, cwd=tmp_path, memory=3 * 2**30)
    detail = (f"exit {outcome.code} after {outcome.elapsed:.0f} CPU s: "
              f"{outcome.stderr[:300]!r}")
    assert outcome.code in (0, 2), detail
    if outcome.code == 2:
        assert_one_error_line(outcome.stderr, Path("big.yaml"), detail)
