"""Errors that reach the user as one line and exit code 2.

Library code raises `ScenarioError` for anything a user can fix (a bad field, an impossible
fabric, a missing file); the CLI prints `str(err)` and exits 2. Nothing else is expected to
escape to the user.
"""

from __future__ import annotations

import reprlib
import unicodedata

# A repr that never walks more than a few elements of a container: a YAML alias bomb shares
# one list 10^10 times over, and a full repr() of it would never finish.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple, _REPR.maxset = 3, 4, 4, 4, 4
_REPR.maxstring, _REPR.maxother = 60, 60


def short_repr(value: object, width: int = 60) -> str:
    """A bounded repr of a user's value for an error message: at most `width` characters and a
    few elements of any container, whatever its size or sharing."""
    text = _REPR.repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: str) -> str:
    """`text` with every control, format, separator and surrogate character escaped
    (``\\n``, ``\\u2028``, ``\\x1b``): an error names a user's key or file name, and those
    must neither split the one error line nor send terminal escapes."""
    if text.isprintable():
        return text
    out = []
    for char in text:
        if char.isprintable() or char == " ":
            out.append(char)
        elif unicodedata.category(char) == "Cs":     # a lone surrogate cannot be encoded
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


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
        return one_line(f"{where}{what}{self.message}")

    def with_source(self, source: str) -> "ScenarioError":
        return ScenarioError(self.field, self.message, source)
