"""The fake API server's fixtures (tests/cluster/kube_fake_apiserver.py)."""

from __future__ import annotations

from kube_fake_apiserver import api_client, apiserver  # noqa: F401
