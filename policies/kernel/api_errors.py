"""The kubernetes client's error answer, imported when first needed.

`except api_exception() as exc:` names the client's `ApiException` without importing the client with the module:
Python evaluates an except clause's class only when an exception reaches it, and code that talks to an API
server has the client loaded by then. The controllers' and stores' modules are imported by every `kgwe serve`,
also over a YAML directory, where the client's package (a quarter to half a CPU-second) is never used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException


def api_exception() -> type[ApiException]:
    from kubernetes.client import exceptions

    return exceptions.ApiException
