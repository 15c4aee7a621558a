from __future__ import annotations


# The fake API server lives with the cluster-source tests (on pytest's pythonpath); gang_support.py extends it.
