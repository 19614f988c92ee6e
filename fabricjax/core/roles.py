"""How a jitted program reads a settings field: the roles a field declares in its
`Annotated[...]` metadata, for a policy's section and for the scenario's own sections alike.

TRACED: a traced array of the program (a sweep over it never recompiles). STATIC: hashable,
fixes a loop bound, a length or a branch under jit (a change compiles a new program). A field
with neither is read on the host. The docs' reference pages print each field's role.
"""

from __future__ import annotations

from typing import Any


class Role:
    """How a program reads a settings field (put it in the field's `Annotated[...]`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name.upper()

    def __get_pydantic_json_schema__(self, core_schema, handler):
        # the role reaches the JSON Schema (and the reference pages) as "x-role"
        schema = handler(core_schema)
        schema["x-role"] = self.name
        return schema


TRACED = Role("traced")   # a traced array among `options`: a sweep over it never recompiles
STATIC = Role("static")   # hashable among `settings`: fixes a loop bound or a length under jit


def role(section: Any, field: str) -> Role | None:
    """TRACED, STATIC or None (read on the host) for a field of a settings model (an
    instance or its class)."""
    model = section if isinstance(section, type) else type(section)
    info = model.model_fields[field]
    return next((m for m in info.metadata if isinstance(m, Role)), None)
