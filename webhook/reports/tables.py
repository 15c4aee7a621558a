"""Plain aligned text tables for the command line (no dependency, no colours, no box drawing)."""

from __future__ import annotations

from collections.abc import Sequence

Cell = str | int | float | None


def _text(cell: Cell) -> str:
    if cell is None:
        return "-"
    if isinstance(cell, float):
        return f"{cell:g}"
    return str(cell)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, right: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell, two spaces apart; columns named in `right` align right.

    The last column is never padded, so long messages do not drag trailing spaces along.
    """
    texts = [[_text(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in texts:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))
    aligned_right = {headers.index(name) for name in right if name in headers}

    def line(cells: Sequence[str]) -> str:
        parts = []
        for index, cell in enumerate(cells):
            last = index == len(cells) - 1
            if index in aligned_right:
                parts.append(cell.rjust(widths[index]))
            else:
                parts.append(cell if last else cell.ljust(widths[index]))
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in texts)])
