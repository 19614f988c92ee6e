"""The executable cache (core.executables): a warm process loads the compiled programs
without tracing; a corrupt entry or one recorded under another JAX falls back to compiling
and gives the same numbers; keys are the same in every process."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.serialize_executable import serialize

from fabricjax.core import executables
from fabricjax.core.executables import MAGIC, PREFIX, Unkeyable, cached_jit, fingerprint
from fabricjax.core.jax_internals import compilation_cache_off, lru_store
from fabricjax.fabric.clos import ClosGeometry
from fabricjax.policies import get

REPO = Path(__file__).resolve().parents[1]
TRACES: list = []


def _program(policy, x, pair, *, scale):
    """A small program with a frozen-dataclass static, a pytree argument and a static
    keyword; every trace is recorded."""
    TRACES.append(policy.name)
    return {"sum": jnp.sum(x * scale) + pair[0], "max": jnp.max(x) * pair[1].astype(x.dtype)}


@pytest.fixture
def exec_cache(tmp_path):
    """The executable cache on in a fresh folder (JAX's settings restored after)."""
    names = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
             "jax_compilation_cache_max_size", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_compilation_cache_max_size", 2**30)
    # JAX's own cache writes nothing here: every compile below is a real one (a program that
    # JAX's cache supplies is not stored; tested with the engine below)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1e9)
    executables.set_enabled(True)
    yield tmp_path
    executables.set_enabled(False)
    for name, value in saved.items():
        jax.config.update(name, value)


def _call():
    """A fresh wrapper called on the same inputs, JAX's in-memory caches dropped (what a new
    process starts from)."""
    jax.clear_caches()
    fun = cached_jit(_program, static_argnums=0, static_argnames="scale")
    x = np.linspace(0.0, 3.0, 17, dtype=np.float32)
    out = fun(get("mrc"), x, (np.float32(0.5), np.int32(3)), scale=2.0)
    return {k: np.asarray(v) for k, v in out.items()}


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"{PREFIX}*-cache"))


def test_a_stored_executable_loads_without_tracing(exec_cache):
    TRACES.clear()
    first = _call()
    assert TRACES == ["mrc"] and len(_entries(exec_cache)) == 1
    loaded = executables.counters()["loaded"]
    again = _call()
    assert TRACES == ["mrc"], "the stored executable was not used"
    assert executables.counters()["loaded"] == loaded + 1
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])
    # the reference: the same function under plain jit
    plain = jax.jit(_program, static_argnums=0, static_argnames="scale")(
        get("mrc"), np.linspace(0.0, 3.0, 17, dtype=np.float32),
        (np.float32(0.5), np.int32(3)), scale=2.0)
    for k in first:
        np.testing.assert_array_equal(np.asarray(plain[k]), first[k])


def _rewrite_header(path: Path, **changes) -> None:
    """Change fields of an entry's recorded key, keeping its checksum valid."""
    blob = path.read_bytes()
    start = len(MAGIC) + 8
    size = int.from_bytes(blob[len(MAGIC):start], "little")
    header = json.loads(blob[start:start + size])
    header.update(changes)
    text = json.dumps(header, sort_keys=True).encode()
    path.write_bytes(MAGIC + len(text).to_bytes(8, "little") + text + blob[start + size:])


@pytest.mark.parametrize("damage", ["flip-payload", "truncate", "garbage", "jax-version",
                                    "other-function"])
def test_a_bad_entry_falls_back_and_gives_the_same_numbers(exec_cache, damage):
    TRACES.clear()
    first = _call()
    (entry,) = _entries(exec_cache)
    blob = entry.read_bytes()
    if damage == "flip-payload":
        middle = len(blob) * 2 // 3
        entry.write_bytes(blob[:middle] + bytes(b ^ 0xFF for b in blob[middle:middle + 64])
                          + blob[middle + 64:])
    elif damage == "truncate":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbage":
        entry.write_bytes(MAGIC + b"\xff" * 8 + b"not an entry")
    elif damage == "jax-version":
        _rewrite_header(entry, jax="0.0.1")
    else:
        _rewrite_header(entry, function="somewhere.else")
    rejected = executables.counters()["rejected"]
    again = _call()
    assert TRACES == ["mrc", "mrc"], "a bad entry was used instead of compiling afresh"
    assert executables.counters()["rejected"] == rejected + 1
    for k in first:
        np.testing.assert_array_equal(again[k], first[k])
    # the fresh compile replaced the bad entry: the next process loads it
    _call()
    assert TRACES == ["mrc", "mrc"]


def _big_program(x):
    """Large enough that XLA:CPU runs it asynchronously: an error surfaces when read."""
    return {"sum": jnp.sum(jnp.sin(x) * 2.0), "max": jnp.max(x) * 3.0}


def test_an_entry_that_fails_when_run_falls_back(exec_cache):
    """An entry that checks out but whose program fails when run (an executable that XLA:CPU
    loaded from JAX's cache and serialised again: its code is missing, and on a large input
    XLA says so only when the result is read) is rejected, and the call gives the right
    numbers."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    x = np.linspace(0.0, 1.0, 4_000_000, dtype=np.float32)
    want = jax.jit(_big_program)(x)            # JAX's cache now holds the program
    jax.clear_caches()
    fun = cached_jit(_big_program)
    reloaded = fun.jitted.lower(x).compile()   # deserialised from JAX's cache
    dynamic, record = fun._split((x,), {})
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    serialized, _, out_tree = serialize(reloaded)
    payload = pickle.dumps((serialized, out_tree))
    (exec_cache / f"{PREFIX}{key}-cache").write_bytes(executables._pack(record, payload))
    rejected = executables.counters()["rejected"]
    got = cached_jit(_big_program)(x)
    assert executables.counters()["rejected"] == rejected + 1, "the broken entry ran"
    for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]))


def test_other_inputs_are_other_programs(exec_cache):
    """Another static value, shape or dtype is another key (and is traced)."""
    TRACES.clear()
    jax.clear_caches()
    fun = cached_jit(_program, static_argnums=0, static_argnames="scale")
    x = np.ones(4, np.float32)
    fun(get("mrc"), x, (np.float32(0), np.int32(1)), scale=2.0)
    fun(get("spray"), x, (np.float32(0), np.int32(1)), scale=2.0)
    fun(get("mrc"), x, (np.float32(0), np.int32(1)), scale=3.0)
    fun(get("mrc"), np.ones(5, np.float32), (np.float32(0), np.int32(1)), scale=2.0)
    fun(get("mrc"), x, (np.float32(0), np.float32(1)), scale=2.0)
    assert len(TRACES) == 5 and len(_entries(exec_cache)) == 5
    fun(get("mrc"), x + 1, (np.float32(7), np.int32(2)), scale=2.0)    # same key: no trace
    assert len(TRACES) == 5


def test_an_unkeyable_static_takes_the_jit_path(exec_cache):
    def local(x, f):
        return f(x)

    fun = cached_jit(local, static_argnums=1)
    out = fun(np.arange(3.0, dtype=np.float32), lambda v: v * 2)
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0])
    assert _entries(exec_cache) == []
    with pytest.raises(Unkeyable):
        fingerprint(lambda v: v)
    with pytest.raises(Unkeyable):
        fingerprint(object())


KEY_SCRIPT = """
import json
from fabricjax.core.executables import fingerprint
from fabricjax.fabric.clos import ClosGeometry
from fabricjax.policies import get
geom = ClosGeometry(gpus=64, planes=2, gpus_per_t0=8, t0s=8, spines=8, port_gbps=100.0,
                    radix=16)
print(json.dumps([fingerprint(get(name)) for name in ("ecmp", "spray", "mrc", "optimal")]
                 + [fingerprint(((0, 64), {"a": 1.5}, geom))]))
"""


def test_keys_are_the_same_in_another_process():
    """Static arguments are fingerprinted by value: a child process (another hash seed)
    gives the same fingerprints."""
    geom = ClosGeometry(gpus=64, planes=2, gpus_per_t0=8, t0s=8, spines=8, port_gbps=100.0,
                        radix=16)
    here = [fingerprint(get(name)) for name in ("ecmp", "spray", "mrc", "optimal")]
    here.append(fingerprint(((0, 64), {"a": 1.5}, geom)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345"}
    child = subprocess.run([sys.executable, "-c", KEY_SCRIPT], capture_output=True, text=True,
                           env=env, check=True)
    assert json.loads(child.stdout) == json.loads(json.dumps(here))


ANALYZE_SCRIPT = """
import json, sys
from fabricjax.core import executables
from fabricjax.core.cache import enable_compile_cache
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
enable_compile_cache(sys.argv[1])
scenario = parse_scenario({
    "name": "aot", "seed": 3,
    "fabric": {"kind": "multiplane-clos", "gpus": 32, "planes": 2, "radix": 8},
    "workload": [{"name": "perm", "collective": "permutation", "size": "4MiB"}],
    "failures": {"links": {"random": 2}, "samples": 2, "seed": 1},
    "policies": ["ecmp"]})
report = analyze(scenario)
records = repr(report.records) + repr(report.failures)
print(json.dumps({"records": records, "counters": executables.counters()}))
"""


def _analyze(folder: Path, refill: str = "on") -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
           executables.ENV_REFILL: refill}
    child = subprocess.run([sys.executable, "-c", ANALYZE_SCRIPT, str(folder)],
                           capture_output=True, text=True, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_the_engine_warm_process_compiles_nothing_and_bad_entries_fall_back(tmp_path):
    """analyze (baseline, failure sets, progressive) in processes on one folder: the first
    compiles and stores; the second loads every program and compiles none; after damaging
    every entry (half corrupt, half recorded under another JAX) the third compiles again
    (JAX's cache supplies the programs; without refill nothing is stored), the fourth compiles
    them once more and stores them (refill), and the fifth loads them all. All give the same
    records."""
    cold = _analyze(tmp_path)
    assert cold["counters"]["compiled"] >= 3 and cold["counters"]["stored"] >= 3
    warm = _analyze(tmp_path)
    assert warm["counters"]["compiled"] == 0, warm["counters"]
    assert warm["counters"]["loaded"] == cold["counters"]["stored"]
    assert warm["records"] == cold["records"]
    entries = _entries(tmp_path)
    for i, entry in enumerate(entries):
        if i % 2:
            _rewrite_header(entry, jax="0.0.1")
        else:
            blob = entry.read_bytes()
            entry.write_bytes(blob[:-100] + bytes(b ^ 0x5A for b in blob[-100:]))
    damaged = _analyze(tmp_path, refill="off")
    assert damaged["counters"]["rejected"] == len(entries)
    assert damaged["counters"]["loaded"] == 0
    assert damaged["records"] == cold["records"]
    # the programs came from JAX's cache (the cold run wrote it): without refill they are
    # used and not stored, since a deserialised XLA:CPU executable cannot be serialised again
    assert damaged["counters"]["stored"] == 0 and damaged["counters"]["refilled"] == 0
    assert _entries(tmp_path) == []
    # with refill (the default) each is compiled once more, bypassing JAX's cache, and stored
    refilled = _analyze(tmp_path)
    assert refilled["counters"]["refilled"] == cold["counters"]["stored"], refilled["counters"]
    assert refilled["counters"]["stored"] == cold["counters"]["stored"]
    assert refilled["records"] == cold["records"]
    # so the next process loads every program again and compiles none
    again = _analyze(tmp_path)
    assert again["counters"]["compiled"] == 0 and again["counters"]["loaded"] == len(entries)
    assert again["records"] == cold["records"]


def test_release_when_crowded_drops_compiled_programs_past_the_bound():
    """Past the bound the process's compiled programs go (a long benchmark or the suite stays
    under the kernel's limit on memory mappings) and the next call compiles again; under it
    they stay."""
    double = jax.jit(lambda x: 2.0 * x)
    assert float(double(1.0)) == 2.0 and double._cache_size() == 1
    assert executables.memory_mappings() > 0
    assert not executables.release_when_crowded(10**9)
    assert double._cache_size() == 1
    assert executables.release_when_crowded(0)
    assert double._cache_size() == 0
    assert float(double(3.0)) == 6.0


def test_the_private_jax_names_the_cache_relies_on_are_where_it_looks(tmp_path):
    # core.jax_internals is the one module past JAX's public API: on the installed JAX its
    # store keeps and returns bytes, and its context compiles and leaves the cache on after
    store = lru_store(str(tmp_path), max_size=-1)
    store.put("key", b"payload")
    assert store.get("key") == b"payload"
    with compilation_cache_off():
        assert jax.jit(lambda x: x + 1)(1) == 2
    assert jax.config.jax_enable_compilation_cache


def test_only_the_adapter_imports_private_jax():
    package = Path(__file__).resolve().parents[1] / "fabricjax"
    offenders = [path.name for path in package.rglob("*.py")
                 if "jax._src" in path.read_text() and path.name != "jax_internals.py"]
    assert offenders == []
