"""Columns that fit the terminal: numbers first, decoration with what is left.

The live view is read at 80 columns as often as at 250. A rich `Table` shrinks every column
alike when space runs out, so numbers were cut ("27…" °C) while sparklines kept their width.
Here each column says how much it matters: numbers are never cut; a column of text (a process
name) may be shortened with "…"; bars and sparklines are drawn at whatever width is left, and
whole columns give way, least important first. When even the numbers do not fit, `lay_out`
says so and the caller prints one block per row instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

GAP = 2  # spaces between columns


@dataclass(frozen=True)
class Column:
    """One column. `cells` are texts, or a function drawing them at a given width (bars).

    rank 0 is always shown; higher ranks are added in order while they fit at `least`, and
    get the space left in the same order, up to `most` (0: their widest cell).
    """

    header: str
    cells: Sequence[str] | Callable[[int], Sequence[str]]
    rank: int = 0
    right: bool = False
    least: int = 0  # narrowest worth showing (drawn columns; text that may be cut)
    most: int = 0
    cut: bool = False  # text that may be shortened with "…" (never a number)

    def natural(self) -> int:
        if callable(self.cells):
            return max(self.most, len(self.header))
        widest = max((len(cell) for cell in self.cells), default=0)
        return max(widest, len(self.header)) if self.most == 0 else min(widest, self.most)

    def smallest(self) -> int:
        if callable(self.cells) or self.cut:
            return max(self.least, len(self.header) if not callable(self.cells) else 1)
        return self.natural()

    def texts(self, width: int) -> Sequence[str]:
        return self.cells(width) if callable(self.cells) else self.cells


def lay_out(columns: Sequence[Column], width: int) -> list[tuple[Column, int]] | None:
    """The columns to show and their widths, in display order; None when the rank-0 columns
    do not fit in `width` at their smallest."""
    chosen: dict[int, int] = {}  # position -> width
    used = -GAP
    for position, column in enumerate(columns):
        if column.rank == 0:
            chosen[position] = column.smallest()
            used += chosen[position] + GAP
    if used > width:
        return None
    for position, column in sorted(enumerate(columns), key=lambda pc: pc[1].rank):
        if column.rank == 0:
            continue
        if used + GAP + column.smallest() <= width:
            chosen[position] = column.smallest()
            used += chosen[position] + GAP
    # What is left goes to the columns in rank order, each up to its natural width.
    for position, column in sorted(enumerate(columns), key=lambda pc: pc[1].rank):
        if position not in chosen:
            continue
        grow = min(column.natural() - chosen[position], width - used)
        if grow > 0:
            chosen[position] += grow
            used += grow
    return [(columns[p], w) for p, w in sorted(chosen.items())]


def _fit(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        text = text[: max(width - 1, 0)] + "…" if width > 0 else ""
    return text.rjust(width) if right else text.ljust(width)


def lines(layout: Sequence[tuple[Column, int]]) -> list[str]:
    """The header and one line per row, trailing spaces trimmed."""
    drawn = [(column, w, column.texts(w)) for column, w in layout]
    rows = max((len(texts) for _, _, texts in drawn), default=0)
    header = (" " * GAP).join(_fit(c.header, w, c.right) for c, w, _ in drawn).rstrip()
    out = [header]
    for row in range(rows):
        cells = [_fit(texts[row] if row < len(texts) else "", w, c.right) for c, w, texts in drawn]
        out.append((" " * GAP).join(cells).rstrip())
    return out
