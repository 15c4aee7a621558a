"""Prometheus metrics of the HTTP shell, on prometheus_client's default registry (served at /metrics)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Sub-millisecond resolution at the low end: the admission core answers in well under 1 ms.
DURATION_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.0075,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)

ADMISSION_REQUESTS = Counter(
    "kgwe_admission_requests_total",
    "AdmissionReviews answered, by endpoint, decision and webhook mode.",
    ["endpoint", "allowed", "mode"],
)
ADMISSION_DURATION = Histogram(
    "kgwe_admission_duration_seconds",
    "Time from receiving an AdmissionReview to having its response serialized.",
    ["endpoint"],
    buckets=DURATION_BUCKETS,
)
ADMISSION_ERRORS = Counter(
    "kgwe_admission_errors_total",
    "Admission requests that could not be decided normally, by kind: bad_request, too_large, deadline, internal,"
    " disconnected (the client left before sending its whole body).",
    ["endpoint", "kind"],
)
LARGE_REVIEWS = Counter(
    "kgwe_large_reviews_total",
    "AdmissionReviews over the large-body threshold, which take the lane of webhook/server/large_lane.py, by"
    " endpoint and turn: taken (decided) or none (no turn before the deadline: answered as a deadline failure).",
    ["endpoint", "turn"],
)
CERTIFICATE_EXPIRY = Gauge(
    "kgwe_certificate_expiry_timestamp_seconds",
    "Unix time at which the serving certificate currently loaded expires.",
)
