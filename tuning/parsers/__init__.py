"""One room for reading the fabric's tools (issue 3). Importing this package
registers every parser in :data:`tuning.parsers.base.REGISTRY`.

Use :func:`parse` (``parse("ib_write_bw", text)``) or the per-tool functions.
"""

from tuning.parsers.base import CONTEXT, REGISTRY, Finding, Parsed, ParseError, Quantity, ToolFailure, parse  # noqa: F401

# Each parser module registers itself on import; add new modules here.
import importlib as _importlib
import pkgutil as _pkgutil

for _m in _pkgutil.iter_modules(__path__):
    if _m.name != "base":
        _importlib.import_module(f"{__name__}.{_m.name}")
