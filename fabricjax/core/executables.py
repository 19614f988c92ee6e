"""Compiled executables kept on disk, so that a warm process neither traces nor lowers.

JAX's persistent compilation cache is keyed on the lowered program, so every new process
still traces and lowers each program (a few tenths of a second for each phase program)
before it can find the binary. `cached_jit` is a drop-in for `jax.jit` that keeps the compiled
executable itself (`jax.experimental.serialize_executable`) under a key made of everything
that makes the program, and loads it without tracing when the key matches:

- the function (module and qualified name) and the source of the whole fabricjax package (a
  change anywhere in the package is a new key: the program calls into every layer below);
- the arguments: pytree structure (custom nodes' static data included), shapes, dtypes and
  weak types; the static arguments, fingerprinted by value (dataclasses, named tuples,
  tuples, numbers, strings, enums), never by `hash` or `id`, so the key is the same in every
  process;
- fabricjax, JAX and jaxlib versions, the backend, its platform version, device kind and
  count, XLA_FLAGS and the JAX options that change a traced program (x64, dtype and rank
  promotion, matmul precision, PRNG implementation).

Where: JAX's persistent cache folder (`core.cache.enable_compile_cache`), as files named
`fabricjax-exec-<sha256>-cache` beside JAX's own, written and read through JAX's
size-bounded LRU store: one size bound and one file lock for both, and `fabricjax cache
--clear` removes both. Off whenever JAX's persistent cache is off (the default for a library
user who never enables it) or FABRICJAX_EXEC_CACHE=off: then `cached_jit` is `jax.jit` plus
one check.

A program that JAX's persistent cache supplies (after a change to fabricjax's source or
version, which changes every key here but not the lowered programs JAX keys on; or written
by the plain jit path) cannot be stored as it is: XLA:CPU cannot serialise an executable it
deserialised. It is compiled once more with JAX's cache bypassed and that executable is
stored, so the first run after an upgrade pays what a cold run pays and the next ones load;
FABRICJAX_EXEC_REFILL=off skips the second compile (the program then costs tracing and
lowering in every process until JAX's entry is evicted or `fabricjax cache --clear`).

Every entry records its full key and the SHA-256 of its payload; an entry whose record
differs from the current key (another JAX, a hash collision, a foreign file) or whose payload
does not match its checksum (a torn or corrupt write) is ignored before anything is
deserialised; an entry that fails to load, or whose first run fails, is removed and the call
takes the normal jit path: a bad entry costs a compilation, never a crash or a wrong number. Static arguments this module cannot
fingerprint (a device mesh, a closure) also take the normal jit path. The entries are pickles
of the user's own compiled programs: like JAX's cache folder, the folder must not be writable
by anyone else.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import gc
import hashlib
import inspect
import io
import json
import os
import pickle
import sys
import time
from importlib import metadata
from pathlib import Path

import jax
import numpy as np

from fabricjax.core.jax_internals import compilation_cache_off, lru_store

PREFIX = "fabricjax-exec-"
MAGIC = b"fabricjax-executable/1\n"
FORMAT = 1
ENTRY_SUFFIX = "-cache"      # how JAX's LRU store names an entry's file
# XLA:CPU (JAX 0.10) cannot serialise an executable that it deserialised: one that JAX's
# persistent cache supplied would be stored broken ("Function ... not found" when run). Such
# a compile is used by this process and not stored (JAX's cache keeps supplying it; a later
# cold compile stores it); JAX reports the hit as this event.
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_hits = [0]
REFILL_OPTIONS = {"xla_embed_ir_in_executable": False}     # XLA's default


def _count_hit(event: str, **_) -> None:
    if event == CACHE_HIT_EVENT:
        _hits[0] += 1


jax.monitoring.register_event_listener(_count_hit)
# JAX options that change what a function traces to (read at call time: some are contexts)
TRACE_OPTIONS = ("jax_enable_x64", "jax_numpy_dtype_promotion", "jax_numpy_rank_promotion",
                 "jax_default_matmul_precision", "jax_default_prng_impl",
                 "jax_threefry_partitionable")
# options under which a cached binary would skip a check the user asked for
BYPASS_OPTIONS = ("jax_disable_jit", "jax_debug_nans", "jax_debug_infs", "jax_enable_checks")

ENV_SWITCH = "FABRICJAX_EXEC_CACHE"      # "off": this process never uses the cache
ENV_REFILL = "FABRICJAX_EXEC_REFILL"     # "off": never compile again what JAX's cache gave
# the memory mappings past which `release_when_crowded` drops the compiled programs: a quarter
# of Linux's default vm.max_map_count (65,530), so what runs next has room to grow
MAX_MAPPINGS = 16_000
_OFF = ("off", "0", "false", "no")

_state = {"enabled": os.environ.get(ENV_SWITCH, "on").strip().lower() not in _OFF,
          "loaded": 0, "rejected": 0, "stored": 0, "compiled": 0, "refilled": 0, "fallbacks": 0,
          "load_s": 0.0, "compile_s": 0.0}
_wrappers: list = []


class Unkeyable(TypeError):
    """A static argument (or pytree node data) that has no process-independent fingerprint."""


def set_enabled(flag: bool) -> None:
    """Switch the executable cache on or off for this process (on unless the environment
    says FABRICJAX_EXEC_CACHE=off; active only while JAX's persistent cache has a folder)."""
    _state["enabled"] = bool(flag)


def counters() -> dict:
    """Executables loaded from disk, entries rejected (corrupt, foreign, unloadable),
    executables stored and compiled, programs compiled a second time because JAX's cache
    supplied them (`refilled`), calls that fell back to `jax.jit`, and the seconds spent
    loading (reading, checking, deserialising) and compiling (tracing, lowering, compiling,
    storing) in this process (for benchmarks and tests)."""
    return {k: v for k, v in _state.items() if k != "enabled"}


def clear_memory() -> None:
    """Drop every executable held in memory by every `cached_jit` (the disk keeps them)."""
    for wrapper in _wrappers:
        wrapper.memo.clear()


def memory_mappings() -> int:
    """The process's memory mappings (0 where /proc is not there)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


def release_when_crowded(max_mappings: int = MAX_MAPPINGS) -> bool:
    """Drop JAX's in-memory compiled programs and those `cached_jit` holds once the process
    holds more than `max_mappings` memory mappings; whether it did. Every loaded XLA:CPU
    executable holds some, and a process that compiles program after program (a test suite,
    a benchmark over many cases) passes Linux's vm.max_map_count (65,530 by default) and
    crashes inside XLA ("LLVM compilation error: Cannot allocate memory", then a segfault).
    Below the bound the next call reuses them (counting takes about a millisecond)."""
    if memory_mappings() <= max_mappings:
        return False
    jax.clear_caches()
    clear_memory()
    gc.collect()   # the executables' mappings go when their last reference does
    return True


def folder() -> Path | None:
    """The folder of JAX's persistent compilation cache when it is on, else None."""
    if not _state["enabled"] or not jax.config.jax_enable_compilation_cache:
        return None
    path = jax.config.jax_compilation_cache_dir
    return Path(path) if path else None


# --------------------------------------------------------------------------- fingerprints

def _name(obj) -> str:
    qualname = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if not qualname or not module or "<" in qualname:     # <lambda>, <locals>
        raise Unkeyable(f"no stable name for {obj!r}")
    return f"{module}.{qualname}"


def fingerprint(obj):
    """A JSON-able value that identifies `obj` by value, the same in every process; raises
    Unkeyable for what it cannot identify so (objects without a value-based description)."""
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, enum.Enum):
        return ["enum", _name(type(obj)), obj.name]
    if isinstance(obj, int):
        return ["int", str(obj)]
    if isinstance(obj, float):
        return ["float", float.hex(obj)]
    if isinstance(obj, (np.generic, np.dtype)):
        return ["np", str(getattr(obj, "dtype", obj)), repr(obj)]
    if isinstance(obj, bytes):
        return ["bytes", obj.hex()]
    if isinstance(obj, type):
        return ["type", _name(obj)]
    if dataclasses.is_dataclass(obj):
        return ["dataclass", _name(type(obj)),
                [[f.name, fingerprint(getattr(obj, f.name))] for f in dataclasses.fields(obj)]]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return ["namedtuple", _name(type(obj)), [fingerprint(v) for v in obj]]
    if type(obj) in (tuple, list):
        return [type(obj).__name__, [fingerprint(v) for v in obj]]
    if type(obj) is dict:
        items = [[fingerprint(k), fingerprint(v)] for k, v in obj.items()]
        return ["dict", sorted(items, key=lambda kv: json.dumps(kv[0]))]
    if type(obj) in (set, frozenset):
        return ["set", sorted((fingerprint(v) for v in obj), key=json.dumps)]
    if isinstance(obj, np.ndarray):
        return ["ndarray", obj.dtype.str, list(obj.shape),
                hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()]
    if inspect.ismethod(obj):   # a bound method: its object is part of what it computes
        return ["method", _name(obj.__func__), fingerprint(obj.__self__)]
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):   # by name: source in the key
        return ["callable", _name(obj)]
    raise Unkeyable(f"no value fingerprint for a {type(obj).__name__}")


def tree_fingerprint(treedef) -> list:
    """The pytree structure with every node's type and static data, by value."""
    data = treedef.node_data()
    if data is None:
        return ["*"]
    node_type, aux = data
    return [_name(node_type), fingerprint(aux),
            [tree_fingerprint(child) for child in treedef.children()]]


def leaf_fingerprint(leaf) -> list:
    """Shape, dtype and weak type of one argument leaf (an array or a Python scalar)."""
    aval = jax.api_util.shaped_abstractify(leaf)
    return [list(aval.shape), str(aval.dtype), bool(getattr(aval, "weak_type", False))]


PACKAGE = Path(__file__).resolve().parents[1]


@functools.cache
def package_source() -> str:
    """SHA-256 of every .py file of the fabricjax package (paths and contents)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def module_source(module: str) -> str:
    """SHA-256 of the source file of a function's module outside the package ("" inside it:
    `package_source` covers it, and everything it calls)."""
    path = getattr(sys.modules.get(module), "__file__", None)
    if path is None:
        raise Unkeyable(f"no source file for module {module}")
    path = Path(path).resolve()
    if path.is_relative_to(PACKAGE):
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def _platform() -> dict:
    device = jax.devices()[0]
    return {"fabricjax": _version("fabricjax"), "jax": jax.__version__,
            "jaxlib": _version("jaxlib"), "backend": jax.default_backend(),
            "platform_version": str(device.client.platform_version),
            "device_kind": str(device.device_kind), "devices": jax.device_count(),
            "source": package_source()}


def environment() -> dict:
    """What besides the function and its arguments makes a compiled program."""
    options = {name: str(getattr(jax.config, name, None)) for name in TRACE_OPTIONS}
    return {**_platform(), "xla_flags": os.environ.get("XLA_FLAGS", ""), "options": options}


# --------------------------------------------------------------------------- the wrapper

@functools.cache
def _store(where: str, max_size: int):
    """JAX's own size-bounded LRU store on the folder: the same eviction and file lock."""
    return lru_store(where, max_size)


def _pack(record: dict, payload: bytes) -> bytes:
    header = json.dumps({**record, "payload_sha256": hashlib.sha256(payload).hexdigest()},
                        sort_keys=True).encode()
    return MAGIC + len(header).to_bytes(8, "little") + header + payload


def _unpack(blob: bytes, record: dict) -> bytes | None:
    """The payload of an entry whose record is `record` and whose checksum holds, else None."""
    if not blob.startswith(MAGIC):
        return None
    start = len(MAGIC) + 8
    size = int.from_bytes(blob[len(MAGIC):start], "little")
    header = json.loads(blob[start:start + size])
    payload = blob[start + size:]
    stored = header.pop("payload_sha256", None)
    if header != json.loads(json.dumps(record, sort_keys=True)):
        return None
    if stored != hashlib.sha256(payload).hexdigest():
        return None
    return payload


class CachedJit:
    """`jax.jit(fun, static_argnums=..., static_argnames=...)` whose compiled executables
    are kept in memory and on disk (see the module docstring). Called like the jitted
    function; `lower`, `trace`, `eval_shape` and other attributes are the jitted function's."""

    def __init__(self, fun, *, static_argnums=(), static_argnames=()):
        self.fun = fun
        self.jitted = jax.jit(fun, static_argnums=static_argnums,
                              static_argnames=static_argnames)
        nums = (static_argnums,) if isinstance(static_argnums, int) else static_argnums
        self.static_argnums = frozenset(nums)
        self.static_argnames = frozenset((static_argnames,) if isinstance(static_argnames, str)
                                         else static_argnames)
        self.memo: dict = {}
        functools.update_wrapper(self, fun)
        _wrappers.append(self)

    def __getattr__(self, name):
        return getattr(self.jitted, name)

    def __call__(self, *args, **kwargs):
        where = folder()
        if where is None or any(getattr(jax.config, o, False) for o in BYPASS_OPTIONS):
            return self.jitted(*args, **kwargs)
        try:
            dynamic, record = self._split(args, kwargs)
        except Unkeyable:
            return self.jitted(*args, **kwargs)
        key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        compiled = self.memo.get(key)
        if compiled is not None:
            return compiled(*dynamic[0], **dynamic[1])
        start = time.perf_counter()
        compiled = self._load(where, key, record, dynamic)
        _state["load_s"] += time.perf_counter() - start
        if compiled is not None:
            try:    # a loaded program's first run: a bad one fails before any effect (waited
                # for: XLA reports a broken executable when the result is read, not at dispatch)
                out = jax.block_until_ready(compiled(*dynamic[0], **dynamic[1]))
            except Exception:       # noqa: BLE001 -- then the jit path answers
                self._reject(where, key)
                _state["fallbacks"] += 1
                return self.jitted(*args, **kwargs)
            self.memo[key] = compiled
            return out
        start = time.perf_counter()
        compiled = self._compile(where, key, record, args, kwargs)
        _state["compile_s"] += time.perf_counter() - start
        if compiled is None:
            _state["fallbacks"] += 1
            return self.jitted(*args, **kwargs)
        self.memo[key] = compiled
        return compiled(*dynamic[0], **dynamic[1])

    @staticmethod
    def _reject(where: Path, key: str) -> None:
        """Count a bad entry and remove it (JAX's store never overwrites an entry, so the
        fresh compile could not replace it)."""
        _state["rejected"] += 1
        (where / f"{PREFIX}{key}{ENTRY_SUFFIX}").unlink(missing_ok=True)

    def _split(self, args, kwargs):
        """((dynamic args, dynamic kwargs), the key record) of one call."""
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        static = [[i, fingerprint(a)] for i, a in enumerate(args) if i in self.static_argnums]
        static += [[k, fingerprint(v)] for k, v in sorted(kwargs.items())
                   if k in self.static_argnames]
        leaves, treedef = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        record = {"format": FORMAT, "function": _name(self.fun),
                  "module_source": module_source(self.fun.__module__), "static": static,
                  "tree": tree_fingerprint(treedef),
                  "leaves": [leaf_fingerprint(leaf) for leaf in leaves], **environment()}
        return (dyn_args, dyn_kwargs), record

    def _load(self, where: Path, key: str, record: dict, dynamic):
        """The executable stored under `key`, checked against `record`; None on a miss or on
        any problem with the entry."""
        from jax.experimental.serialize_executable import deserialize_and_load

        try:
            blob = _store(str(where), jax.config.jax_compilation_cache_max_size).get(
                PREFIX + key)
            if blob is None:
                return None
            payload = _unpack(blob, record)
            if payload is None:
                raise ValueError("foreign or corrupt entry")
            serialized, out_tree = pickle.loads(payload)
            in_tree = jax.tree_util.tree_structure(dynamic)
            compiled = deserialize_and_load(serialized, in_tree, out_tree)
        except Exception:       # noqa: BLE001 -- any bad entry: compile afresh instead
            self._reject(where, key)
            return None
        _state["loaded"] += 1
        return compiled

    def _compile(self, where: Path, key: str, record: dict, args, kwargs):
        """Trace, lower and compile (through JAX's persistent cache), then store the
        executable unless JAX's cache supplied it; None when this call cannot be compiled
        ahead (the jit path then decides, and raises the user's error if there is one)."""
        from jax.experimental.serialize_executable import serialize

        hits = _hits[0]
        try:
            compiled = self.jitted.lower(*args, **kwargs).compile()
        except Exception:       # noqa: BLE001 -- the jit path raises the user's error
            return None
        _state["compiled"] += 1
        if _hits[0] != hits:    # deserialised from JAX's cache: not storable (CACHE_HIT_EVENT)
            if os.environ.get(ENV_REFILL, "on").strip().lower() in _OFF:
                return compiled
            try:                # a real compile, which can be stored
                with compilation_cache_off():
                    # an option at its default value makes it a new compile: without one,
                    # JAX's in-memory cache hands back the deserialised executable
                    compiled = self.jitted.lower(*args, **kwargs).compile(
                        compiler_options=REFILL_OPTIONS)
            except Exception:   # noqa: BLE001 -- keep the one JAX's cache gave
                return compiled
            _state["refilled"] += 1
        try:
            serialized, _, out_tree = serialize(compiled)
            with io.BytesIO() as buffer:
                pickle.dump((serialized, out_tree), buffer, protocol=pickle.HIGHEST_PROTOCOL)
                payload = buffer.getvalue()
            _store(str(where), jax.config.jax_compilation_cache_max_size).put(
                PREFIX + key, _pack(record, payload))
            _state["stored"] += 1
        except Exception:       # noqa: BLE001 -- not serialisable or not writable: memory only
            pass
        return compiled


def cached_jit(fun=None, *, static_argnums=(), static_argnames=()):
    """`jax.jit` with executables kept across processes; usable as `cached_jit(f, ...)`,
    `@cached_jit` or `@functools.partial(cached_jit, static_argnums=...)`."""
    if fun is None:
        return functools.partial(cached_jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames)
    return CachedJit(fun, static_argnums=static_argnums, static_argnames=static_argnames)
