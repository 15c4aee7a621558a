"""Fuzzing the webhook: hypothesis over AdmissionReviews and pods, schemathesis over the JSON API's OpenAPI.

Example counts are bounded so the suite stays fast; `KGWE_FUZZ_EXAMPLES` raises them for a longer hunt, and
the `slow` variant runs five times as many.

schemathesis' pytest plugin is turned off for the whole suite (`-p no:schemathesis` in pyproject.toml: loading
it cost every pytest process about 0.9 CPU-s); test_openapi_schemathesis.py builds its tests itself, when it runs.
"""
