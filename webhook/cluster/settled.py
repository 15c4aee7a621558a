"""Whether a background pass over the whole cluster has anything left to do.

A pass that is a function of the snapshot and the configuration (the bound-pod controller's cost annotations,
the HardwareProfiles' availability) has nothing new to do while both are those of the last pass that finished
everything it meant to; at 150,000 pods such a pass is seconds of CPU every interval that admission's event
loop waits on (issue 36). A pass that left something to retry (a write the API server refused) is not settled.
"""

from __future__ import annotations

from webhook.cluster.model import ClusterModel


class Settled:
    """The (snapshot generation, configuration) of the last pass that left nothing to retry."""

    def __init__(self) -> None:
        self._for: tuple[int, int] | None = None

    def holds(self, model: ClusterModel, config: object) -> bool:
        """True while `model` and `config` are those of the last settled pass: the next one would redo it."""
        return self._for == (model.generation, id(config))

    def record(self, model: ClusterModel, config: object, *, complete: bool) -> None:
        """The pass over `model` and `config` ended; `complete`: nothing left to retry."""
        self._for = (model.generation, id(config)) if complete else None

    def forget(self) -> None:
        """The next pass runs whatever it finds (a follower that becomes leader again, say)."""
        self._for = None
