"""The kubernetes client's own quantity parser, without the client.

`import kubernetes.utils.quantity` runs `kubernetes/__init__.py` first, which imports the whole client (its
REST layer, models, config loaders and, through `kubernetes.dynamic`, jsonschema): about half a CPU-second that
`kgwe review`, `kgwe explain` and every test process paid to parse `16Gi`. The parser is one module that
imports only `decimal`, so it is loaded from the installed package's file by itself. Where the client is
already imported (the server, the controllers) its module is used as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import ModuleType

_MODULE = "kubernetes.utils.quantity"
# The name the stand-alone copy is registered under: not the client's, so a later `import kubernetes` loads
# its own package in full and nothing in it sees a half-imported `kubernetes.utils`.
_STANDALONE = "policies.vocabulary._kubernetes_utils_quantity"


def _standalone() -> ModuleType:
    package = importlib.util.find_spec("kubernetes")  # locates the package; does not run it
    if package is None or not package.submodule_search_locations:
        raise ImportError("the kubernetes client is not installed (pip install kubernetes)")
    path = Path(next(iter(package.submodule_search_locations))) / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location(_STANDALONE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the kubernetes client's quantity parser from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_STANDALONE] = module
    spec.loader.exec_module(module)
    return module


def _load() -> Callable[[object], Decimal]:
    module = sys.modules.get(_MODULE) or sys.modules.get(_STANDALONE) or _standalone()
    parse: Callable[[object], Decimal] = module.parse_quantity
    return parse


parse_quantity = _load()
