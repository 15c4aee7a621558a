"""API clients for calls made inside an admission deadline.

urllib3 retries a timed-out GET or PUT up to three times by default, each attempt with the full timeout,
so a call given "the time left before the deadline" could take four times that. Clients made here never
retry: the caller's own retry loop (compare-and-swap, the webhook's failure policy) decides what happens.
"""

from __future__ import annotations

import copy

from kubernetes.client import ApiClient, Configuration


def deadline_api_client(configuration: Configuration | None = None) -> ApiClient:
    """An ApiClient like the default one (or like `configuration`) that makes exactly one attempt per call."""
    config = copy.copy(configuration) if configuration is not None else Configuration.get_default_copy()
    config.retries = False
    return ApiClient(config)
