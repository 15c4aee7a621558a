"""The copied quantity parser (policies/vocabulary/quantities.py) answers as the kubernetes client's does: the
same Decimal, or a ValueError where the client raises one."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

from cluster_dirs import ROOT
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from policies.vocabulary.quantities import kubernetes_quantity

EDGES = [
    "", "0", "1", "-1", "+1", "1.5", ".5", "5.", "1e3", "1E3", "1e-3", "1e+3", "1e999999999", "9e999999999Ei",
    "1e-999999999n", "inf", "Infinity", "-inf", "nan", "NaN", "sNaN", "1_000", " 1", "1 ", "1 Gi",
    "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei", "1ki", "1mi", "1ni", "1ui", "1Ki ", "Ki", "Gi", "i", "1i", "1ii",
    "1n", "1u", "1m", "1k", "1K", "1M", "1G", "1T", "1P", "1E", "E", "m", "1EE", "1e", "1e3Gi", "0.5Gi",
    "100m", "250m", "16Gi", "80Gi", "1.0", "0x10", "\u0661", "1\u00a0",  # an Arabic-Indic one: Decimal reads it
]


def _answer(parse: object, text: str) -> tuple[str, str]:
    try:
        value = parse(text)  # type: ignore[operator]
    except ValueError:
        return ("ValueError", "")
    assert isinstance(value, Decimal)
    return ("Decimal", str(value))


def test_edge_cases_answer_as_the_client_does() -> None:
    for text in EDGES:
        assert _answer(kubernetes_quantity, text) == _answer(client_parse_quantity, text), text


@given(st.from_regex(r"\A[-+]?[0-9]{0,4}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,3})?(Ki|Mi|Gi|Ti|Pi|Ei|ki|mi|[numkKMGTPE])?\Z")
       | st.text(alphabet="0123456789.eE+-nmuiKMGTPkx ", max_size=12))
def test_generated_texts_answer_as_the_client_does(text: str) -> None:
    assert _answer(kubernetes_quantity, text) == _answer(client_parse_quantity, text)


def test_reading_a_quantity_imports_no_kubernetes_client() -> None:
    script = ("import sys; from policies.vocabulary.quantities import parse_quantity; parse_quantity('16Gi'); "
              "print('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True,
                          cwd=ROOT)
    assert done.stdout.strip() == "False"
