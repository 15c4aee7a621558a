"""The CEL suite covers every Kubernetes library function we add, on both CEL engines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policies.runtime.testing import run_cel_tests

SUITE = Path(__file__).parent / "cel"
LIBRARY_FUNCTIONS = (
    "quantity(", "isQuantity(", ".sign()", ".isInteger()", ".asInteger()", ".asApproximateFloat()", ".add(", ".sub(",
    ".isLessThan(", ".isGreaterThan(", ".compareTo(", ".sum()", ".min()", ".max()", ".isSorted()", ".indexOf(",
    ".lastIndexOf(", ".find(", ".findAll(", ".matches(", ".?", "optional.",
)


@pytest.mark.parametrize("engine", ["cel-expr-python", "cel-python"])
def test_cel_library_suite(engine: str) -> None:
    results = run_cel_tests(SUITE, engine)
    assert len(results) >= 30
    assert [(r.name, r.detail) for r in results if not r.passed] == []


def test_suite_covers_every_library_function() -> None:
    cases = yaml.safe_load((SUITE / "k8s_library.celtest.yaml").read_text())["cases"]
    expressions = " ".join(c["expression"] for c in cases)
    assert [f for f in LIBRARY_FUNCTIONS if f not in expressions] == []
