"""The one status vocabulary of every solver: a set of flags, combined with ``|``.

Solvers never raise inside jit; they return an int32 of these flags and the host turns it
into words with `status_text` (one function for every table and record). The bit order is
the order in which the words are printed. `SETTLED` says how mrc's fixed point ended and
`SKIPPED` that the progressive simulation gave up early (its figures are absent, the static
ones stand); neither is a problem: `status_text` leaves them out unless asked (`PROBLEMS` is
the default mask).
"""

from __future__ import annotations

import enum


class Status(enum.IntFlag):
    OK = 0
    ROUND_LIMIT = 1      # max-min filling stopped at max_rounds: unfrozen rates are lower bounds
    STALLED = 2          # a flow with bytes to send has rate 0 (no live path): the step stalls
    ITERATION_CAP = 4    # an adaptive policy (mrc, optimal) stopped at its max_iters
    LOST_PLANE = 8       # optimal: a flow has no live path on some plane (that share is dropped)
    EVENT_LIMIT = 16     # the progressive simulation stopped at max_events (times extrapolated)
    SETTLED = 32         # mrc stopped in a noisy equilibrium (patience), not balanced
    SKIPPED = 64         # progressive: auto gave up, on pace to pass max_events (no figures)


NAMES = {Status.ROUND_LIMIT: "round_limit", Status.STALLED: "stalled",
         Status.ITERATION_CAP: "iteration_cap", Status.LOST_PLANE: "lost_plane",
         Status.EVENT_LIMIT: "event_limit", Status.SETTLED: "settled",
         Status.SKIPPED: "skipped"}
PROBLEMS = (Status.ROUND_LIMIT | Status.STALLED | Status.ITERATION_CAP | Status.LOST_PLANE
            | Status.EVENT_LIMIT)


def status_names(code: int, mask: int = PROBLEMS) -> list[str]:
    """The names of the flags of `mask` set in `code`, in bit order (["ok"] when none is)."""
    return [name for flag, name in NAMES.items() if code & mask & flag] or ["ok"]


def status_text(code: int, mask: int = PROBLEMS) -> str:
    """`status_names` joined with ``+``: ``ok``, ``stalled``, ``round_limit+iteration_cap``."""
    return "+".join(status_names(code, mask))
