"""`-o json` and `-o yaml` of the command line: one document, the same content in either format (as kubectl's
`-o json` and `-o yaml` are), so a script can pick whichever its tools read."""

from __future__ import annotations

from typing import Any

import orjson

FORMATS = ("json", "yaml")


def render(document: Any, output: str) -> str:
    """`document` as `output` ("json" or "yaml"), without a trailing newline."""
    if output == "yaml":
        import yaml  # here: `kgwe --help` reads FORMATS from this module and needs no YAML (docs/performance.md)

        # Through JSON first: what orjson writes (dataclasses, datetimes) is what YAML shows, as plain data.
        plain = orjson.loads(orjson.dumps(document))
        return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip()
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()
