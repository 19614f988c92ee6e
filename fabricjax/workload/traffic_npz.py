"""NumPy .npz traffic files: 1-D arrays ``src``, ``dst``, ``size`` (or ``bytes``), optional
``start``, read without unpickling. `load_npz` returns the flows' arrays or raises through
`fail`.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.workload.traffic_matrix import MAX_FLOWS, gpus_text

_NPZ_KEYS = "required: src, dst, size (or bytes); optional: start"
ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"


def load_npz(path: Path, num_gpus: int, fail):
    """The arrays of an .npz, read member by member with numpy's format reader and
    allow_pickle=False; each header is checked before its data is read, so an object array
    is refused unread and a forged shape cannot make us allocate more than the archive holds.
    """
    try:
        handle = open(path, "rb")
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror or type(err).__name__})") from None
    with handle:
        magic = handle.read(len(_NPY_MAGIC))
        if magic.startswith(_NPY_MAGIC):
            raise fail("is a single .npy array, not an .npz archive; allowed: np.savez(path, "
                       "src=..., dst=..., size=...[, start=...])")
        if not magic.startswith(ZIP_MAGIC[:2]):
            raise fail("is not an .npz archive (not a zip file); allowed: np.savez(path, "
                       "src=..., dst=..., size=...[, start=...])")
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                arrays = _npz_arrays(archive, fail)
        except ScenarioError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as err:
            raise fail(f"is not a readable .npz archive ({_reason(err)}); allowed: "
                       "np.savez(path, src=..., dst=..., size=...[, start=...])") from None

    lengths = {key: array.shape[0] for key, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{key}: {n}" for key, n in lengths.items())
        raise fail(f"arrays have different lengths ({listed}); allowed: one entry per flow "
                   "in every array")

    def where(i: int) -> str:
        return f"flow at index {i}"

    ids = {}
    for key in ("src", "dst"):
        array = arrays[key]
        if array.dtype.kind == "u" and array.size and int(array.max()) >= 2**63:
            i = int(np.argmax(array >= 2**63))
            raise fail(f"{where(i)}: {key} {int(array[i])} is not a GPU of this fabric; "
                       f"{gpus_text(num_gpus)}")
        ids[key] = array.astype(np.int64)
    size = arrays["size"].astype(np.float64)
    start = arrays["start"].astype(np.float64) if "start" in arrays else \
        np.zeros(size.shape[0])
    return ids["src"], ids["dst"], size, start, where


def _reason(err: BaseException) -> str:
    text = str(err).split("\n", 1)[0][:80]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _npz_arrays(archive: zipfile.ZipFile, fail) -> dict[str, np.ndarray]:
    members = {}
    for info in archive.infolist():
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        members[key] = info
    unknown = [k for k in members if k not in ("src", "dst", "size", "bytes", "start")]
    if unknown:
        raise fail(f"has unknown array {short_repr(unknown[0])}; allowed keys: {_NPZ_KEYS}")
    if "size" in members and "bytes" in members:
        raise fail(f"has both 'size' and 'bytes' (aliases); allowed keys: {_NPZ_KEYS}")
    if "bytes" in members:
        members["size"] = members.pop("bytes")
    missing = [k for k in ("src", "dst", "size") if k not in members]
    if missing:
        raise fail(f"lacks array {', '.join(repr(k) for k in missing)}; allowed keys: "
                   f"{_NPZ_KEYS}")
    arrays = {}
    for key, info in members.items():
        arrays[key] = _npz_member(archive, info, key, fail)
    return arrays


def _npz_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, fail) -> np.ndarray:
    if info.flag_bits & 0x1:
        raise fail(f"array {key!r} is encrypted; allowed: a plain np.savez archive")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise fail(f"array {key!r} uses zip compression method {info.compress_type}; allowed: "
                   "np.savez or np.savez_compressed archives")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise fail(f"array {key!r} is in .npy format version {version}; allowed: plain "
                       "numeric arrays (versions 1.0 and 2.0)")
    ids = key in ("src", "dst")
    kinds = "iu" if ids else "iuf"
    if dtype.hasobject or dtype.kind not in kinds:
        allowed = "an integer array of GPU ids" if ids else "a numeric (integer or float) array"
        never = " (object arrays are never unpickled)" if dtype.hasobject else ""
        raise fail(f"array {key!r} has dtype {short_repr(str(dtype))}; allowed: {allowed}{never}")
    if len(shape) != 1:
        raise fail(f"array {key!r} has shape {shape}; allowed: a 1-D array, one entry per flow")
    if shape[0] > MAX_FLOWS:
        raise fail(f"array {key!r} has {shape[0]:,} entries; allowed: up to {MAX_FLOWS:,} flows")
    if shape[0] * dtype.itemsize > info.file_size:
        raise fail(f"array {key!r} is truncated (its header promises {shape[0]:,} entries); "
                   "allowed: an intact np.savez archive")
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)


