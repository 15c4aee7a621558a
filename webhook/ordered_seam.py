"""An ordered seam: the core names the steps of one of its pipelines in order and fills the ones it owns;
the wings (webhook/dra, webhook/gangs, ...) provide the others by name, and the assembly
(webhook/assembly.py) registers them. Reading a seam with a step left unfilled raises: a core put
together without its wings is a mistake, never a smaller product (a wing a deployment turns off is turned
off by its configuration, and its step passes the pod on)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class SeamNotFilled(RuntimeError):
    """A seam was read before the assembly registered every wing's step."""


class OrderedSeam(Generic[T]):
    """The steps of one pipeline by name, in the core's order."""

    def __init__(self, seam: str, order: Sequence[str], core: Mapping[str, T]) -> None:
        self.seam = seam
        self.order = tuple(order)
        self._core = frozenset(core)
        self._entries: dict[str, T] = {}
        self._steps: tuple[tuple[str, T], ...] | None = None
        self._fill(core)

    def fill(self, entries: Mapping[str, T]) -> None:
        """Register wing steps at their names. Registering a name again replaces its step (the assembly
        may register twice); a name the core owns or does not list is refused."""
        owned = sorted(set(entries) & self._core)
        if owned:
            raise ValueError(f"{self.seam}: {', '.join(owned)} belong to the core")
        self._fill(entries)

    def _fill(self, entries: Mapping[str, T]) -> None:
        unknown = sorted(set(entries) - set(self.order))
        if unknown:
            raise ValueError(f"{self.seam}: no step named {', '.join(unknown)} (it names {', '.join(self.order)})")
        self._entries.update(entries)
        if not self.missing():
            self._steps = tuple((name, self._entries[name]) for name in self.order)

    def missing(self) -> list[str]:
        """The names no step fills yet."""
        return [name for name in self.order if name not in self._entries]

    @property
    def steps(self) -> tuple[tuple[str, T], ...]:
        """(name, step) in order."""
        if self._steps is None:
            raise SeamNotFilled(f"{self.seam}: nothing registered for {', '.join(self.missing())}; "
                                "build through webhook.assembly, which registers the wings")
        return self._steps


class SeamSlot(Generic[T]):
    """One wing's part that a core step calls into (the DRA planner the MIG step asks on DRA nodes, ...)."""

    def __init__(self, seam: str) -> None:
        self.seam = seam
        self._value: T | None = None

    def fill(self, value: T) -> None:
        self._value = value

    @property
    def value(self) -> T:
        if self._value is None:
            raise SeamNotFilled(f"{self.seam}: nothing registered; build through webhook.assembly, which registers "
                                "the wings")
        return self._value
