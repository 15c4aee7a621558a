"""The cluster model's fact readers: what a wing adds to the node facts from objects of kinds the model
keeps for it (the DRA wing's ResourceSlices and ResourceClaims, webhook/dra/facts.py). A reader gets every
node's facts after the node objects were read, and returns them with its part folded in; readers run in
the order named here, on every snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from policies.vocabulary.accelerator_types import AcceleratorTable
from webhook.cluster.node_facts import NodeFacts
from webhook.ordered_seam import OrderedSeam

# The store's objects: kind -> `namespace/name` (or `name`) -> object.
ObjectsByKind = Mapping[str, Mapping[str, dict[str, Any]]]


class FactReader(Protocol):
    def __call__(
        self, facts: dict[str, NodeFacts], objects: ObjectsByKind, table: AcceleratorTable
    ) -> dict[str, NodeFacts]: ...


FACT_READERS: OrderedSeam[FactReader] = OrderedSeam("cluster fact readers", ("dra",), {})

# The kinds the readers read besides the nodes (the DRA wing's). A change to another kind keeps the node side
# (node_side.py): a TenantQuota's status, written after every quota pass that moves it, rebuilt every node's
# facts and the type index (a quarter to half a second at 10,000 nodes) ahead of the next pass (issue 36). The
# readers get these kinds only, so one that reads another fails instead of going stale.
READ_KINDS = ("ResourceSlice", "ResourceClaim")
