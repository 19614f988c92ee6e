"""Shared test setup: JAX on the CPU, small fabrics, one tolerance helper per dtype.

JAX is pinned to the CPU before anything imports it (set JAX_PLATFORMS yourself to override),
so the suite gives the same float32 answers on a laptop and on a GPU machine.
"""

from __future__ import annotations

import os
import resource

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The suite's fabrics are small: compiling their programs costs more than running them, so
# LLVM skips its optimisation passes here (a fresh clone's suite 531 s against 695 s). The
# results may differ in their last bits (one documentation output broke a tie between two
# links the other way), so the documentation's outputs, compared digit for digit, are run
# as a user's run is (docs/generate.py drops XLA_FLAGS), and so is the 1,024-GPU quickstart
# analysis of tests/test_analysis.py, which spends longer running than compiling. Elsewhere
# XLA_FLAGS set outside wins.
# Subprocesses that set XLA_FLAGS of their own add COMPILE_FLAGS to them.
COMPILE_FLAGS = "--xla_backend_optimization_level=0"
os.environ.setdefault("XLA_FLAGS", COMPILE_FLAGS)
# The suite's own compilation cache (never the user's): the command-line tests run the real
# process, which compiles the same phase programs as the in-process tests and each other;
# with one folder for the session (and the next local run) they load them instead.
# FABRICJAX_CACHE_DIR=off in the environment runs the suite without it.
os.environ.setdefault("FABRICJAX_CACHE_DIR", os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".pytest_cache",
    "fabricjax-xla"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# CI (CI=true) replays the same examples every run, so a red build is reproducible; a local run
# explores fresh ones (the fuzzing that finds new bugs); HYPOTHESIS_PROFILE picks one explicitly.
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("dev")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE",
                                     "ci" if os.environ.get("CI") else "dev"))

import fabricjax.policies  # noqa: E402,F401  (registers the built-in policies' settings)
from fabricjax.core import executables
from fabricjax.core.cache import enable_compile_cache
from fabricjax.fabric.clos import build_fabric
from fabricjax.config import ClosConfig
from fabricjax.scenario import parse_scenario

enable_compile_cache()
# In this process the engine's programs take the plain jit path: the tests that count
# retraces (jit's cache size, trace events) measure jit's in-memory cache. The executable
# cache is tested on its own (tests/test_executables.py) and by every command-line test,
# whose process uses it on the suite's cache folder.
executables.set_enabled(False)
# The suite's own processes compile the same programs in-process (JAX's cache only) and from
# the command line: a command that finds JAX's entry keeps it rather than compiling once more
# to store its executable (tests/test_executables.py tests that refill on its own).
os.environ.setdefault(executables.ENV_REFILL, "off")


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Drop JAX's in-memory compiled programs after a test once the process holds many
    memory mappings. Every loaded XLA:CPU executable holds some; the whole suite in one
    process passed Linux's vm.max_map_count (65,530) about two thirds of the way through and
    crashed inside XLA (a segfault while compiling or loading a program). Dropping them after
    every module instead made each module trace, lower and load its programs again; below the
    bound the next test reuses them (counting the mappings takes about a millisecond)."""
    yield
    executables.release_when_crowded()


# --cpu-durations=N: the tests that used the most CPU seconds (this process and the children
# it waited for, setup and call). Unlike --durations' wall seconds, a machine busy with other
# jobs does not change them, so the slowest tests can be found on a loaded machine.
CPU_KEY = pytest.StashKey[float]()
_cpu_seconds: dict = {}


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=0, metavar="N",
                     help="show the N tests that used the most CPU seconds")


def _cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    start = _cpu_now()
    yield
    item.stash[CPU_KEY] = item.stash.get(CPU_KEY, 0.0) + _cpu_now() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = _cpu_now()
    yield
    item.stash[CPU_KEY] = item.stash.get(CPU_KEY, 0.0) + _cpu_now() - start
    item.user_properties.append(("cpu_s", item.stash[CPU_KEY]))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:     # also the reports of xdist's workers
        if name == "cpu_s" and report.when == "call":
            _cpu_seconds[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("--cpu-durations")
    if not count or not _cpu_seconds:
        return
    terminalreporter.section(f"{count} tests that used the most CPU seconds")
    for nodeid, seconds in sorted(_cpu_seconds.items(), key=lambda kv: -kv[1])[:count]:
        terminalreporter.write_line(f"{seconds:8.2f} CPU s  {nodeid}")


# rtol/atol per dtype. float32: the solver's own saturation slack is 1e-5 relative, and a few
# rounds of f32 sums each lose ~1e-7; 1e-4 leaves room for both without hiding real errors
# (a wrong bottleneck moves a rate by a whole share, i.e. >= 10%).
_TOLERANCES = {
    np.dtype(np.float16): dict(rtol=1e-2, atol=1e-3),
    np.dtype(np.float32): dict(rtol=1e-4, atol=1e-5),
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12),
}


def tolerance(dtype) -> dict:
    """{'rtol', 'atol'} for comparing arrays of `dtype` against a float64 reference."""
    return dict(_TOLERANCES[np.dtype(dtype)])


def assert_close(actual, expected, *, dtype=None, **override):
    actual = np.asarray(actual)
    tol = tolerance(dtype if dtype is not None else actual.dtype)
    tol.update(override)
    np.testing.assert_allclose(actual, np.asarray(expected), **tol)


@pytest.fixture
def strict_promotion():
    """Strict dtype promotion for the duration of one test (STYLE: no silent upcasts)."""
    with jax.numpy_dtype_promotion("strict"):
        yield


def scenario_for(fabric: ClosConfig, *, eps: float = 0.0, max_rounds: int = 10_000,
                 rates: str = "full", transport: bool = True):
    """A minimal valid Scenario around `fabric` (solve_phase reads its solver settings).
    Full max-min rounds by default: these cases compare every flow's rate. `transport`
    False: the plain fluid model (payload bytes on the wire)."""
    return parse_scenario({
        "fabric": fabric.model_dump(),
        "workload": [{"collective": "permutation"}],
        "solver": {"eps": eps, "max_rounds": max_rounds, "rates": rates},
        "transport": {"enabled": transport},
    })


# Small configurations covering planes 1/2/4, radix 4..16, oversubscription 1 and 3, and GPU
# counts that do not fill the last T0.
SMALL_CONFIGS = [
    dict(gpus=4, planes=1, radix=4),
    dict(gpus=5, planes=2, radix=4),
    dict(gpus=7, planes=1, radix=6),
    dict(gpus=12, planes=2, radix=8),
    dict(gpus=13, planes=4, radix=8),
    dict(gpus=20, planes=1, radix=10),
    dict(gpus=9, planes=2, radix=8, oversubscription=3),
    dict(gpus=10, planes=1, radix=4, oversubscription=3),
    dict(gpus=30, planes=4, radix=12, oversubscription=3),
    dict(gpus=64, planes=2, radix=16),
    dict(gpus=50, planes=1, radix=16, oversubscription=3),
    # rail-optimised: 6 servers of 4 GPUs, GPU r of each server on rail T0 r of its group
    dict(gpus=22, planes=2, radix=8, gpus_per_server=4, rail_optimised=True),
]


def config_id(cfg: dict) -> str:
    return "-".join(f"{k[:4]}{v}" for k, v in cfg.items())


@pytest.fixture(params=SMALL_CONFIGS, ids=config_id)
def small_config(request) -> ClosConfig:
    return ClosConfig(**request.param)


# planes=2, radix 8 (4 down, 4 up), 14 GPUs over 4 T0s per plane (the last one short).
TINY_CONFIG = ClosConfig(gpus=14, planes=2, radix=8)


@pytest.fixture(scope="session")
def tiny_fabric():
    return build_fabric(TINY_CONFIG)
