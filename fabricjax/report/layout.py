"""Tables that fit the terminal they are printed on, never by eliding a digit.

Contract: a `FitTable` holds plain-text cells (escaped here) and lays itself out when rich
renders it, at the console's width: figures never wrap nor shrink (each figure column is as
wide as its widest cell), headers wrap at their spaces, text columns (a workload's name, a
status) fold onto more lines; when the columns still do not fit, they are dealt out over as
many tables as it takes, each repeating the key columns (policy, workload) and titled
"(1/2)", "(2/2)", so no column is ever dropped. Rendered wide enough, it is one rich `Table`,
the same as before. No JAX here.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.table import Table

# a text column (a name, a status) is given at most this many characters before it folds
TEXT_WIDTH = 16
# what rich adds around each column (one space of padding either side and a rule) and once
# per table (the left edge)
COLUMN_CHROME = 3
TABLE_CHROME = 1


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its header (may wrap at spaces), and whether its cells are text (left,
    folded when narrow) or figures (right, never wrapped)."""

    header: str
    text: bool = False


def _widest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def column_width(column: Column, cells: Iterable[str]) -> int:
    """The width a column is laid out at: a figure column its widest cell (or header word);
    a text column its widest cell up to TEXT_WIDTH, never below its longest header word."""
    cells = [line for cell in cells for line in cell.splitlines() or [""]]
    widest = max((len(c) for c in cells), default=0)
    if column.text:
        return max(_widest_word(column.header), min(widest, TEXT_WIDTH))
    return max(_widest_word(column.header), widest)


def narrowest_width(column: Column, cells: Iterable[str]) -> int:
    """How narrow a column may get: a figure column never narrows; a text column down to its
    longest word (cell or header), where it folds at its spaces."""
    if not column.text:
        return column_width(column, cells)
    words = [len(word) for cell in cells for word in cell.split()]
    return min(column_width(column, cells), max([_widest_word(column.header), *words]))


def narrowed(widths: Sequence[int], least: Sequence[int], width: int) -> list[int]:
    """`widths` with the text columns (those that may narrow to `least`) narrowed, the widest
    first, until the table fits `width` or none can narrow further: wrapping a text cell
    onto another line is better than a second table."""
    out = list(widths)
    while table_width(out) > width:
        slack = [i for i in range(len(out)) if out[i] > least[i]]
        if not slack:
            break
        widest = max(slack, key=lambda i: (out[i] - least[i], -i))
        out[widest] -= 1
    return out


def table_width(widths: Sequence[int]) -> int:
    """Characters a rich table with these column widths takes (box edges and padding)."""
    return TABLE_CHROME + sum(w + COLUMN_CHROME for w in widths)


def deal_columns(widths: Sequence[int], keys: int, width: int) -> list[list[int]]:
    """Column indices per table: the first `keys` columns in every table, the others in order,
    each table filled while it fits `width` (a table always takes at least one more column,
    so nothing is ever dropped however narrow the screen)."""
    key_cols = list(range(keys))
    parts: list[list[int]] = []
    current = list(key_cols)
    for index in range(keys, len(widths)):
        if len(current) > keys and table_width([widths[i] for i in current + [index]]) > width:
            parts.append(current)
            current = list(key_cols)
        current.append(index)
    if len(current) > keys or not parts:
        parts.append(current)
    return parts


def balanced_columns(widths: Sequence[int], keys: int, width: int) -> list[list[int]]:
    """`deal_columns` with as few tables, but the columns spread evenly over them: the
    narrowest width that still needs no more tables than `width` does (so a second table
    is not left with one column)."""
    parts = deal_columns(widths, keys, width)
    low, high = table_width([widths[i] for i in range(min(keys + 1, len(widths)))]), width
    while low < high:
        middle = (low + high) // 2
        if len(deal_columns(widths, keys, middle)) <= len(parts):
            high = middle
        else:
            low = middle + 1
    return deal_columns(widths, keys, high)


class FitTable:
    """A table of plain-text cells that fits the console it is printed on (see the module
    docstring). `keys`: how many leading columns every part repeats."""

    def __init__(self, title: str, columns: Sequence[Column], *, keys: int = 2,
                 caption: str | None = None):
        self.title = title
        self.columns = list(columns)
        self.keys = keys
        self.caption = caption
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append([str(c) for c in cells])

    @property
    def headers(self) -> list[str]:
        return [c.header for c in self.columns]

    def widths(self, width: int | None = None) -> list[int]:
        """Each column's width: as wide as it needs, narrowed to fit `width` where text may
        wrap."""
        cells = [[row[i] for row in self.rows] for i in range(len(self.columns))]
        widths = [column_width(c, cells[i]) for i, c in enumerate(self.columns)]
        if width is None:
            return widths
        least = [narrowest_width(c, cells[i]) for i, c in enumerate(self.columns)]
        return narrowed(widths, least, width)

    def tables(self, width: int) -> list[Table]:
        """The rich tables this one is printed as at `width` characters."""
        widths = self.widths(width)
        parts = balanced_columns(widths, self.keys, width)
        out = []
        for number, part in enumerate(parts, 1):
            title = self.title if len(parts) == 1 else f"{self.title} ({number}/{len(parts)})"
            table = Table(title=escape(title), title_justify="left",
                          caption=escape(self.caption) if self.caption and
                          number == len(parts) else None, caption_justify="left")
            for index in part:
                column = self.columns[index]
                if column.text:
                    table.add_column(escape(column.header), justify="left",
                                     width=widths[index], overflow="fold")
                else:
                    # exactly its widest cell: a figure never wraps, its header may
                    table.add_column(escape(column.header), justify="right",
                                     width=widths[index])
            for row in self.rows:
                table.add_row(*(escape(row[i]) for i in part))
            out.append(table)
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.tables(options.max_width)
