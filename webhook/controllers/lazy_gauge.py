"""A gauge family whose samples are made as a scrape reads them (issue 36).

prometheus_client's `GaugeMetricFamily` holds a `Sample` (a tuple and a dict of its labels) for every series before
the scrape renders the first line. The per-pod cost families are three series per GPU container: at 10,000 GPU nodes
about 210,000 samples, and a `/metrics` scrape held two families of them beside the text it was writing: 214 MiB
above the worker's heap for a 54 MiB answer, the worker's peak memory (docs/performance.md, "Peak memory at 10,000
nodes"). `LazyGauge` makes each sample when it is read and lets it go, so a scrape holds only the text.

A reader gets the same samples, in the same order, as from a `GaugeMetricFamily` given the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample


class LazySamples(Sequence[Sample]):
    """`rows`' samples of gauge `name`, each made when read: labels zipped with `labelnames`, value by `value`."""

    def __init__(self, name: str, labelnames: tuple[str, ...], rows: Sequence[tuple[tuple[str, ...], Any]],
                 value: Callable[[Any], float]) -> None:
        self._name, self._labelnames, self._rows, self._value = name, labelnames, rows, value

    def _sample(self, row: tuple[tuple[str, ...], Any]) -> Sample:
        labels, values = row
        return Sample(self._name, dict(zip(self._labelnames, labels, strict=True)), float(self._value(values)), None)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Sample: ...

    @overload
    def __getitem__(self, index: slice) -> list[Sample]: ...

    def __getitem__(self, index: int | slice) -> Sample | list[Sample]:
        if isinstance(index, slice):
            return [self._sample(row) for row in self._rows[index]]
        return self._sample(self._rows[index])

    def __iter__(self) -> Iterator[Sample]:
        return (self._sample(row) for row in self._rows)

    def __eq__(self, other: object) -> bool:  # as a list of the same samples (Metric.__eq__ compares samples)
        if isinstance(other, LazySamples | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal by content, and not immutable in what it reads


class LazyGauge(Metric):
    """A gauge family of `rows` (label values, what `value` reads a sample's value from), sampled as read."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str],
                 rows: Sequence[tuple[tuple[str, ...], Any]], value: Callable[[Any], float]) -> None:
        super().__init__(name, documentation, "gauge")
        self.samples = LazySamples(self.name, tuple(labels), rows, value)  # type: ignore[assignment]
