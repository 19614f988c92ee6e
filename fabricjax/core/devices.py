"""Which devices JAX computes on: `--device cpu|gpu`, `--devices N`, `--distributed`, and the
one place that answers "where am I running" for the rest of the library (vmap widths, memory
limits, sharding, the report's record).

`select_device`, `request_devices` and `init_distributed` must run before JAX starts a
backend: `cpu` keeps a GPU machine's accelerator untouched, `request_devices` may set XLA_FLAGS
for virtual CPU devices, and a distributed run must be joined first. `gpu` fails with a clear
message when no GPU is visible to JAX.

Batched, independent work (failure sets) is sharded over `compute_devices()` in JAX's global
order with `device_mesh`; `place` puts host arrays on that mesh as global arrays (valid in
every process of a distributed run, since every process computes the same host arrays from
the seed) and `fetch` brings results back, gathered from every process. Inside
`local_devices()` each process computes on its own devices only (a distributed sweep gives
whole points to processes); `allgather_bytes` and `broadcast_bytes` move encoded results
between processes. `bound_compiled` keeps JAX's compiled programs from piling up over a long
run.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Callable

from fabricjax.core.stream import StreamError

DEVICES = ("cpu", "gpu")
_device_limit: int | None = None     # --devices N: shard over at most N devices
_local_only = False                  # inside local_devices(): this process's devices only
# Backend compilations since JAX's caches were last cleared (counted by a monitoring hook)
_compiled = {"count": 0, "hooked": False}
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class DeviceError(ValueError):
    """The requested device is unknown or not present (a user-fixable option error)."""


def select_device(name: str) -> None:
    import jax

    if name not in DEVICES:
        raise DeviceError(f"unknown device {name!r}; allowed: {', '.join(DEVICES)}")
    if name == "cpu":
        # Before any backend starts this keeps JAX off the accelerator entirely; afterwards
        # the default device still moves every computation to the CPU.
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_default_device", jax.devices("cpu")[0])
        return
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        found = sorted({d.platform for d in jax.devices()})
        raise DeviceError(f"no GPU is visible to JAX (it found: {', '.join(found)}); install "
                          "jax[cuda12] on a machine with an NVIDIA GPU, or use --device cpu")
    jax.config.update("jax_default_device", gpus[0])


def current_device():
    """The device computations land on: the selected default, else JAX's first device."""
    import jax

    chosen = jax.config.jax_default_device
    if chosen is not None and not isinstance(chosen, str):
        return chosen
    if isinstance(chosen, str):
        return jax.devices(chosen)[0]
    return jax.devices()[0]


def limit_devices(count: int | None) -> None:
    """Shard batched work over at most `count` devices (None: every device found)."""
    global _device_limit
    if count is not None and count < 1:
        raise DeviceError(f"must be at least 1, got {count}")
    _device_limit = count


def request_devices(count: int) -> None:
    """Use `count` devices for batched work. Call before JAX starts a backend: on the CPU it
    asks XLA for `count` virtual host devices (XLA_FLAGS, unless the caller set that flag),
    which lets failure sets run side by side on separate cores (scatters run on one core
    each); on a GPU node it takes the first `count` GPUs. `check_devices` verifies."""
    limit_devices(count)
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def check_devices() -> None:
    """A DeviceError when fewer devices are visible than `request_devices` asked for."""
    import jax

    if _device_limit is None:
        return
    platform = current_device().platform
    found = len(jax.devices(platform))
    if found < _device_limit:
        raise DeviceError(f"{_device_limit} devices asked for, {found} {platform} device"
                          f"{'s are' if found != 1 else ' is'} visible; allowed: 1..{found}")


def compute_devices() -> list:
    """The devices batched work is sharded over, in JAX's global order (the same list in every
    process of a distributed run): every device of the current platform (all the GPUs of a
    node, or of every host after `init_distributed`; on a CPU one device unless XLA_FLAGS asks
    for virtual host devices), at most `limit_devices`' count."""
    import jax

    platform = current_device().platform
    found = jax.local_devices(backend=platform) if _local_only else jax.devices(platform)
    return found[:_device_limit] if _device_limit is not None else found


@contextlib.contextmanager
def local_devices():
    """Within this block batched work stays on this process's devices and `fetch` gathers
    nothing: a distributed sweep hands whole points to processes, so a point's failure sets
    must not be sharded over another process's devices (that process is busy elsewhere)."""
    global _local_only
    before = _local_only
    _local_only = True
    try:
        yield
    finally:
        _local_only = before


def device_mesh(count: int):
    """A one-axis mesh ("sets") over the first `count` compute devices."""
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.asarray(compute_devices()[:count]), ("sets",))


def place(tree, mesh=None, *, replicated: bool = False):
    """Host arrays onto the device(s): the default device without a mesh; with one, as global
    arrays, replicated or split along their first axis over the mesh. Valid in every process
    of a distributed run: each process supplies the pieces its own devices hold, from host
    arrays that are the same in every process (they are drawn from the same seeds)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    if mesh is None:
        return jax.device_put(tree)
    spec = PartitionSpec() if replicated else PartitionSpec(mesh.axis_names[0])
    sharding = NamedSharding(mesh, spec)

    def one(value):
        value = np.asarray(value)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(one, tree)


def fetch(tree):
    """Device results as host numpy, gathered from every process in a distributed run."""
    import jax

    if jax.process_count() > 1 and not _local_only:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def init_distributed(coordinator: str | None = None, num_processes: int | None = None,
                     process_id: int | None = None) -> None:
    """Join a multi-process run (one process per host, or per GPU) before any backend starts:
    `jax.distributed.initialize`, which finds the coordinator, process count and id itself
    under SLURM or Open MPI, or takes them explicitly. Every process then sees every process's
    devices in `compute_devices`; CPU processes exchange results over gloo."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address=coordinator,
                                   num_processes=num_processes, process_id=process_id)
    except (RuntimeError, ValueError) as error:
        raise DeviceError(f"could not join the distributed run: {error}") from None


def is_leader() -> bool:
    """Whether this process reports (process 0; always true outside a distributed run)."""
    return process_index() == 0


def process_index() -> int:
    """This process's id in a distributed run (0 outside one)."""
    import jax

    return jax.process_index()


def process_count() -> int:
    """How many processes a distributed run has (1 outside one)."""
    import jax

    return jax.process_count()


def _as_bytes_array(payload: bytes, length: int):
    import numpy as np

    out = np.zeros(length, np.uint8)
    out[:len(payload)] = np.frombuffer(payload, np.uint8)
    return out


def allgather_bytes(payload: bytes) -> list[bytes]:
    """Every process's `payload`, in process order (collective: every process must call it).
    The lengths go first, then the payloads padded to the longest."""
    import numpy as np
    from jax.experimental import multihost_utils

    if process_count() == 1:
        return [payload]
    lengths = np.asarray(multihost_utils.process_allgather(np.int64(len(payload)))).reshape(-1)
    data = np.asarray(multihost_utils.process_allgather(
        _as_bytes_array(payload, int(lengths.max()))))
    return [data[i, :int(n)].tobytes() for i, n in enumerate(lengths)]


def broadcast_bytes(payload: bytes | None) -> bytes:
    """Process 0's `payload` in every process (collective; the others pass anything)."""
    import numpy as np
    from jax.experimental import multihost_utils

    if process_count() == 1:
        return payload or b""
    mine = payload or b""
    length = int(multihost_utils.broadcast_one_to_all(np.int64(len(mine))))
    data = multihost_utils.broadcast_one_to_all(_as_bytes_array(mine, length))
    return np.asarray(data).tobytes()[:length]


def from_leader(compute: Callable[[], Any]) -> Any:
    """`compute()` run by process 0 alone (it reads a file only that host has) and its value,
    JSON data, handed to every process of a distributed run. A StreamError it raises is raised
    in every process, so that all of them stop with the same one line."""
    if process_count() == 1:
        return compute()
    payload = None
    if is_leader():
        try:
            payload = json.dumps({"value": compute()}).encode("utf-8")
        except StreamError as error:
            payload = json.dumps({"error": str(error)}).encode("utf-8")
    data = json.loads(broadcast_bytes(payload).decode("utf-8"))
    if "error" in data:
        raise StreamError(data["error"])
    return data["value"]


def _count_compile(event: str, duration: float, **kwargs) -> None:
    if event == COMPILE_EVENT:
        _compiled["count"] += 1


def compiled_programs() -> int:
    """Backend compilations since JAX's caches were last cleared by `bound_compiled` (counted
    from the first call of either function)."""
    import jax.monitoring

    if not _compiled["hooked"]:
        jax.monitoring.register_event_duration_secs_listener(_count_compile)
        _compiled["hooked"] = True
    return _compiled["count"]


def bound_compiled(limit: int) -> bool:
    """Clear JAX's caches of compiled programs when more than `limit` were compiled since the
    last clear, and say whether it did. JAX keeps every program it compiled for the life of
    the process (one per input shape and static option); a run that keeps meeting new shapes
    (a sweep over fabric sizes) would grow without bound. A run whose shapes repeat compiles
    nothing new after its first points and is never cleared."""
    import jax

    if compiled_programs() <= limit:
        return False
    jax.clear_caches()
    _compiled["count"] = 0
    return True


def shard_devices(batch: int) -> int:
    """How many devices a batch of `batch` independent items is sharded over."""
    return max(1, min(len(compute_devices()), batch))


def device_record() -> dict:
    """What the report records about the device: platform, kind and how many are visible."""
    import jax

    device = current_device()
    return {"device": str(device.platform), "device_kind": str(device.device_kind),
            "device_count": len(jax.devices(device.platform)),
            "devices_used": len(compute_devices()), "processes": jax.process_count()}
