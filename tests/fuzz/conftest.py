"""Fuzzing the webhook: hypothesis over AdmissionReviews and pods, schemathesis over the JSON API's OpenAPI.

Example counts are bounded so the suite stays fast; `KGWE_FUZZ_EXAMPLES` raises them for a longer hunt, and
the `slow` variant runs five times as many.
"""

from __future__ import annotations


