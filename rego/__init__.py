"""The built-in Rego policy library, shipped as package data."""

from pathlib import Path

LIBRARY_DIR = Path(__file__).resolve().parent
