"""Mutation tests admit pods against the example cluster (fixtures shared with tests/placement).

Every test here runs the pipeline in strict ownership mode: each step's own change is checked against
the paths its mutator declares (webhook/mutation/mutators.py), not only the final patch.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from placement_support import admit, runtime  # noqa: F401

from webhook.mutation.pipeline import strict_ownership


@pytest.fixture(autouse=True)
def _strict_mutators() -> Iterator[None]:
    with strict_ownership():
        yield
