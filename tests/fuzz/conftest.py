"""Fuzzing the webhook: hypothesis over AdmissionReviews and pods, schemathesis over the JSON API's OpenAPI.

Example counts are bounded so the suite stays fast; `KGWE_FUZZ_EXAMPLES` raises them for a longer hunt, and
the `slow` variant runs five times as many.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS / "fuzz") not in sys.path:
    sys.path.append(str(TESTS / "fuzz"))

FAULTS = TESTS / "faults"
if str(FAULTS) not in sys.path:
    sys.path.append(str(FAULTS))
