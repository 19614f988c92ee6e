"""Modules imported on first use: a heavy dependency that only some questions need (networkx
for graph fabrics costs a tenth of a second to import; a Clos question never touches it).

Contract: `lazy_module(name)` returns the module `name`, registered in `sys.modules`, whose
code runs at its first attribute access (importlib's `LazyLoader`); an already imported
module is returned as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """`name`, imported on its first attribute access."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
