"""The one place fabricjax reaches past JAX's public API, for the executable cache
(`core.executables`). JAX has no public form of either:

- `lru_store(folder, max_size)`: JAX's own size-bounded, file-locked LRU store, the one its
  persistent compilation cache writes through; the executable cache shares its eviction and
  lock so the two never fight over one folder;
- `compilation_cache_off()`: a context in which a compile bypasses the persistent cache (a
  fresh compile, which XLA:CPU can serialise; one the cache supplied it cannot).

Both names are checked on the installed JAX by tests/test_executables.py; a JAX that moves
them fails there, not in a user's run.
"""

from __future__ import annotations

from jax._src import config as _config
from jax._src.lru_cache import LRUCache as _LRUCache


def lru_store(folder: str, max_size: int) -> _LRUCache:
    """JAX's LRU file store on `folder`, at most `max_size` bytes (-1: unbounded)."""
    return _LRUCache(folder, max_size=max_size)


def compilation_cache_off():
    """A context manager: compiles inside it neither read nor write the persistent cache."""
    return _config.enable_compilation_cache(False)
