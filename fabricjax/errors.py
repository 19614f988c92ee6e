"""Errors that reach the user as one line and exit code 2.

Library code raises `ScenarioError` for anything a user can fix (a bad field, an impossible
fabric, a missing file); the CLI prints `str(err)` and exits 2. Nothing else is expected to
escape to the user.
"""

from __future__ import annotations


class ScenarioError(ValueError):
    """A user-fixable problem with a scenario, named by its field path.

    `field` is a dotted path such as ``fabric.radix`` or ``workload[1].size`` (empty when the
    problem is with the file as a whole); `source` is the file it came from, if any.
    """

    def __init__(self, field: str, message: str, source: str | None = None):
        self.field = field
        self.message = message
        self.source = source
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        what = f"{self.field}: " if self.field else ""
        return f"{where}{what}{self.message}"

    def with_source(self, source: str) -> "ScenarioError":
        return ScenarioError(self.field, self.message, source)
