"""Load tests drive `kgwe serve` with bench/soak.py, the same code the benchmark runs."""

from __future__ import annotations


