"""htsim's connection matrices (``Nodes N``, ``Connections C``, then ``S->D [id I] start T
size B`` lines, start in picoseconds), in and out. `parse_htsim` returns the flows' arrays or
raises through `fail`; `write_htsim` writes what csg-htsim reads.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from pathlib import Path

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.workload.traffic_matrix import (MAX_FLOWS, MAX_SIZE_BYTES, INT_RE, TrafficMatrix,
                                               atomic_write, check_writable, count)


# csg-htsim stores a connection's size in a C int (read with std::stoi).
HTSIM_MAX_SIZE = 2**31 - 1
PS_PER_SECOND = 1e12
HTSIM_HEADERS = ("Nodes", "Connections", "Triggers", "Failures")
_HTSIM_CONN = "S->D [id I] start T_ps size BYTES"
_HTSIM_KEYS = ("start", "size", "id", "prio", "send_done_trigger", "recv_done_trigger",
               "trigger", "addon")
_ARROW = re.compile(r"(\d+)->(\d+)")
# Text that the fast path's numpy reader would read differently from the line-by-line path.
_HTSIM_NOT_PLAIN = (" ->", "\t->", "-> ", "->\t", "->-", "+")
_HTSIM_HEAD = re.compile(r"[ \t]*(Nodes|Connections)[ \t]+(\d+)[ \t]*")


def parse_htsim(text: str, num_gpus: int, fail):
    """Fast path for a plain file (a header of Nodes and Connections, then only lines
    ``S->D [id I] start T size B``), read by numpy's C reader and checked as a whole; any
    other file, or any doubt, goes to `_parse_htsim_lines`, which names the problem."""
    head = text.split("\n", 8)[:8]         # the header: Nodes, Connections (and blank lines)
    header: dict[str, int] = {}
    body = -1
    for i, line in enumerate(head):
        match = _HTSIM_HEAD.fullmatch(line)
        if match is not None and match[1] not in header:
            header[match[1]] = int(match[2])
        elif line.strip():
            body = i
            break
    nodes, count = header.get("Nodes", 0), header.get("Connections", -1)
    if not 1 <= nodes <= num_gpus or not 1 <= count <= MAX_FLOWS or body < 0:
        return _parse_htsim_lines(text, num_gpus, fail)
    text_flows = text.split("\n", body)[-1] if body else text
    # Each flow line holds one "->" with digits on both sides (the slow path's S->D rule).
    if text_flows.count("->") != count or any(bad in text_flows for bad in _HTSIM_NOT_PLAIN):
        return _parse_htsim_lines(text, num_gpus, fail)
    keyword = "U8"
    with_id = [("src", "i8"), ("dst", "i8"), ("k1", keyword), ("id", "i8"), ("k2", keyword),
               ("start", "f8"), ("k3", keyword), ("size", "i8")]
    table = None
    for dtype in (with_id, with_id[:2] + with_id[4:]):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = np.loadtxt(io.StringIO(text_flows.replace("->", " ")), dtype=dtype,
                                   ndmin=1)
            break
        except (ValueError, OverflowError):
            continue
    if table is None or table.shape[0] != count:
        return _parse_htsim_lines(text, num_gpus, fail)
    src, dst, size, start = table["src"], table["dst"], table["size"], table["start"]
    names = table.dtype.names
    ok = ((table["k2"] == "start").all() and (table["k3"] == "size").all()
          and ((src >= 0) & (src < nodes) & (dst >= 0) & (dst < nodes)).all()
          and ((size >= 1) & (size <= MAX_SIZE_BYTES)).all()
          and (np.isfinite(start) & (start >= 0)).all())
    if ok and "id" in names:
        ordered = np.sort(table["id"])
        ok = ((table["k1"] == "id").all() and ordered[0] >= 1
              and (ordered[1:] != ordered[:-1]).all())
    if not ok:
        return _parse_htsim_lines(text, num_gpus, fail)
    line_numbers: list[int] = []

    def where(i: int) -> str:
        if not line_numbers:
            line_numbers.extend(n for n, line in enumerate(text_flows.split("\n"), body + 1)
                                if line.strip())
        return f"line {line_numbers[i]}"

    return (src.astype(np.int64), dst.astype(np.int64), size.astype(np.float64),
            start / PS_PER_SECOND, where)


def _parse_htsim_lines(text: str, num_gpus: int, fail):
    """csg-htsim's connection matrix, as read by ConnectionMatrix::load (datacenter/
    connection_matrix.cpp, github.com/Broadcom/csg-htsim; generators in
    datacenter/connection_matrices/gen_*.py).

    Header lines ``Nodes N``, ``Connections C``, ``Triggers T``, ``Failures F`` come first,
    then one line per connection: ``S->D`` followed by keyword/value pairs in any order:
    ``start T`` (picoseconds: htsim stores it unconverted as its picosecond clock; the
    generators write microseconds x 10^6), ``size B`` (bytes, an integer), ``id I`` (flow id,
    nonzero, unique here), ``prio P``, ``send_done_trigger T``, ``recv_done_trigger T``,
    ``trigger T`` and the flag ``addon``; and ``trigger id I oneshot|multishot|barrier
    [count K]`` lines. Differences from htsim, all stricter except the first two: tokens are
    split on any whitespace (htsim: single spaces); ``#`` starts a comment anywhere (htsim:
    only before the first connection); ``Nodes`` and ``Connections`` are required, must
    precede the connections and may appear once; ``size`` and ``start`` are required on every
    connection; numbers must be whole tokens (htsim's stoi reads ``12abc`` as 12); start
    must be >= 0. Start is read as a double (htsim uses stof, a float: above 2^24 ps, about
    17 us, htsim itself rounds start times to a few picoseconds).

    Refused: flows started by ``trigger`` (they start when other flows finish, which a
    traffic matrix with start times cannot express) and ``failure`` lines (fabric failures
    come from the scenario's failures section). Ignored after a syntax check: ``prio``,
    ``addon``, ``send_done_trigger``, ``recv_done_trigger`` and ``trigger`` definitions;
    with no triggered flow they start nothing, so the flows and their times are htsim's.
    """
    header: dict[str, tuple[int, int]] = {}       # keyword -> (value, line number)
    src, dst, size, start, numbers = [], [], [], [], []
    flow_ids: dict[int, int] = {}
    triggers = 0
    in_body = False

    def integer(token: str, what: str, number: int, low: int = 0) -> int:
        if INT_RE.fullmatch(token) is None or int(token) < low:
            raise fail(f"line {number}: {what} {short_repr(token)} is not an integer >= {low}")
        return int(token)

    for number, line in enumerate(text.split("\n"), 1):
        if "#" in line:
            line = line[: line.index("#")]
        tokens = line.split()
        if not tokens:
            continue
        head = tokens[0]
        if head in HTSIM_HEADERS:
            if in_body:
                raise fail(f"line {number}: {head} after the first connection; allowed: "
                           f"header lines ({', '.join(HTSIM_HEADERS)}) before the connections")
            _htsim_header(header, tokens, line, number, num_gpus, integer, fail)
            continue
        if not in_body:
            for needed in ("Nodes", "Connections"):
                if needed not in header:
                    raise fail(f"line {number}: no '{needed} <count>' line before the first "
                               f"connection; allowed: an htsim connection matrix (Nodes N, "
                               f"Connections C, then {_HTSIM_CONN} lines)")
            in_body = True
        if head == "trigger":
            _htsim_trigger(tokens, number, integer, fail)
            triggers += 1
            continue
        if len(src) >= header["Connections"][0] and _ARROW.fullmatch(head) is not None:
            raise fail(f"line {number}: more connections than 'Connections "
                       f"{header['Connections'][0]}' (line {header['Connections'][1]}) says")
        s, d, flow_bytes, start_ps = _htsim_connection(tokens, number, header["Nodes"][0],
                                                       flow_ids, integer, fail)
        src.append(s)
        dst.append(d)
        size.append(flow_bytes)
        start.append(start_ps)
        numbers.append(number)

    _htsim_totals(header, len(src), triggers, fail)
    line_numbers = np.asarray(numbers, dtype=np.int64)

    def where(i: int) -> str:
        return f"line {int(line_numbers[i])}"

    return (np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(size, dtype=np.float64),
            np.asarray(start, dtype=np.float64) / PS_PER_SECOND, where)


def _htsim_header(header: dict, tokens: list[str], line: str, number: int, num_gpus: int,
                  integer, fail) -> None:
    """Check a ``Nodes N`` / ``Connections C`` / ``Triggers T`` / ``Failures F`` line and
    record it in `header` (keyword -> (value, line number))."""
    head = tokens[0]
    if head in header:
        raise fail(f"line {number}: {head} given twice (first at line "
                   f"{header[head][1]}); allowed: once")
    if len(tokens) != 2:
        raise fail(f"line {number}: expected '{head} <count>', got "
                   f"{short_repr(line.strip())}")
    value = integer(tokens[1], head, number)
    if head == "Nodes":
        if value < 1:
            raise fail(f"line {number}: Nodes 0; allowed: 1..{num_gpus}")
        if value > num_gpus:
            raise fail(f"line {number}: Nodes {value} but the job has {num_gpus} "
                       f"GPUs; allowed: Nodes 1..{num_gpus}")
    elif head == "Connections" and value > MAX_FLOWS:
        raise fail(f"line {number}: Connections {value:,}; allowed: up to "
                   f"{MAX_FLOWS:,} flows")
    header[head] = (value, number)


def _htsim_fields(tokens: list[str], number: int, fail) -> dict[str, str]:
    """A connection line's keyword/value pairs after ``S->D`` (``addon`` takes no value)."""
    seen: dict[str, str] = {}
    i = 1
    while i < len(tokens):
        key = tokens[i]
        if key not in _HTSIM_KEYS:
            raise fail(f"line {number}: unknown token {short_repr(key)}; allowed: "
                       f"{', '.join(_HTSIM_KEYS)}")
        if key in seen:
            raise fail(f"line {number}: {key} given twice; allowed: once per connection")
        if key == "addon":
            seen[key] = ""
            i += 1
            continue
        if i + 1 >= len(tokens):
            raise fail(f"line {number}: {key} has no value; allowed: {_HTSIM_CONN}")
        seen[key] = tokens[i + 1]
        i += 2
    return seen


def _htsim_connection(tokens: list[str], number: int, nodes: int, flow_ids: dict[int, int],
                      integer, fail) -> tuple[int, int, int, float]:
    """(src, dst, bytes, start in ps) of a connection line, checked; its id goes into
    `flow_ids` (id -> line number)."""
    head = tokens[0]
    if head == "failure":
        raise fail(f"line {number}: htsim failure lines are not imported; allowed: "
                   "connections only (give failures in the scenario's failures section)")
    match = _ARROW.fullmatch(head)
    if match is None:
        raise fail(f"line {number}: unknown line starting {short_repr(head)}; allowed: "
                   f"{_HTSIM_CONN}, 'trigger id I oneshot|multishot|barrier', or a "
                   f"header ({', '.join(HTSIM_HEADERS)})")
    s, d = int(match.group(1)), int(match.group(2))
    for name, gpu in (("src", s), ("dst", d)):
        if gpu >= nodes:
            raise fail(f"line {number}: {name} {gpu} is not a node of this matrix; "
                       f"allowed: 0..{nodes - 1} (Nodes {nodes})")
    seen = _htsim_fields(tokens, number, fail)
    if "trigger" in seen:
        raise fail(f"line {number}: flow started by trigger {short_repr(seen['trigger'])} "
                   "(when other flows finish) is not supported; allowed: flows with "
                   "'start <picoseconds>'")
    for key in ("size", "start"):
        if key not in seen:
            raise fail(f"line {number}: connection has no {key}; allowed: {_HTSIM_CONN}")
    for key in ("prio", "send_done_trigger", "recv_done_trigger"):
        if key in seen:
            integer(seen[key], key, number)
    if "id" in seen:
        flow_id = integer(seen["id"], "id", number, low=1)
        if flow_id in flow_ids:
            raise fail(f"line {number}: id {flow_id} already used at line "
                       f"{flow_ids[flow_id]}; allowed: unique flow ids")
        flow_ids[flow_id] = number
    flow_bytes = integer(seen["size"], "size", number, low=1)
    if flow_bytes > MAX_SIZE_BYTES:
        raise fail(f"line {number}: size {flow_bytes} bytes; allowed: 1 .. 2^60 bytes")
    try:
        start_ps = float(seen["start"])
    except ValueError:
        raise fail(f"line {number}: start {short_repr(seen['start'])} is not a number; "
                   "allowed: picoseconds >= 0") from None
    if not math.isfinite(start_ps) or start_ps < 0:
        raise fail(f"line {number}: start {short_repr(seen['start'])}; allowed: a finite "
                   "number of picoseconds >= 0")
    return s, d, flow_bytes, start_ps


def _htsim_totals(header: dict, connections: int, triggers: int, fail) -> None:
    """The counts the header declared against what the file held."""
    if "Nodes" not in header or "Connections" not in header:
        raise fail(f"contains no flows; allowed: an htsim connection matrix (Nodes N, "
                   f"Connections C, then {_HTSIM_CONN} lines)")
    declared, declared_at = header["Connections"]
    if connections != declared:
        raise fail(f"line {declared_at}: Connections {declared} but the file has "
                   f"{count(connections, 'connection line')}; allowed: the exact count")
    declared_triggers, triggers_at = header.get("Triggers", (0, 0))
    if triggers != declared_triggers:
        where = f"line {triggers_at}: " if triggers_at else ""
        raise fail(f"{where}Triggers {declared_triggers} but the file has "
                   f"{count(triggers, 'trigger line')}; allowed: the exact count")
    if not connections:
        raise fail(f"contains no flows (Connections 0); allowed: at least one {_HTSIM_CONN}")


def _htsim_trigger(tokens: list[str], number: int, integer, fail) -> None:
    """Check a ``trigger id I oneshot|multishot|barrier [count K]`` line (then ignored)."""
    kinds = [t for t in tokens[1:] if t in ("oneshot", "multishot", "barrier")]
    i, has_id = 1, False
    while i < len(tokens):
        key = tokens[i]
        if key in ("oneshot", "multishot", "barrier"):
            i += 1
            continue
        if key not in ("id", "count") or i + 1 >= len(tokens):
            raise fail(f"line {number}: bad trigger line; allowed: 'trigger id I "
                       "oneshot|multishot|barrier [count K]'")
        integer(tokens[i + 1], f"trigger {key}", number, low=1 if key == "id" else 0)
        has_id = has_id or key == "id"
        i += 2
    if not has_id or len(kinds) != 1:
        raise fail(f"line {number}: a trigger needs an id and one type; allowed: 'trigger id I "
                   "oneshot|multishot|barrier [count K]'")


def write_htsim(path: Path, matrix: TrafficMatrix, nodes: int, *, field: str = "") -> None:
    """Write an htsim connection matrix: ``Nodes``, ``Connections``, then
    ``S->D id I start T size B`` with ids 1..F, start rounded to whole picoseconds (htsim's
    clock) and sizes rounded up to whole bytes. Sizes above 2^31-1 bytes are refused (htsim
    reads sizes into a C int); use `write_csv` for those."""
    path = Path(path)
    check_writable(matrix, path, field)
    top = int(max(matrix.src.max(), matrix.dst.max()))
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes <= top:
        raise ScenarioError(field, f"{path}: cannot write Nodes {nodes!r}: the matrix uses GPU "
                            f"{top}; allowed: nodes >= {top + 1}")
    size = np.ceil(matrix.size)
    if size.max() > HTSIM_MAX_SIZE:
        i = int(np.argmax(size > HTSIM_MAX_SIZE))
        raise ScenarioError(field, f"{path}: flow {i} has {size[i]:.0f} bytes; allowed in "
                            f"htsim: up to {HTSIM_MAX_SIZE} bytes (it reads sizes into a C "
                            "int); write CSV instead")
    start_ps = np.rint(matrix.start * PS_PER_SECOND)
    lines = [f"Nodes {int(nodes)}", f"Connections {matrix.num_flows}"]
    lines += [f"{s}->{d} id {i} start {t} size {b}" for i, (s, d, t, b) in enumerate(
        zip(matrix.src.tolist(), matrix.dst.tolist(), map(int, start_ps.tolist()),
            map(int, size.tolist())), 1)]
    atomic_write(path, "\n".join(lines) + "\n", field)


