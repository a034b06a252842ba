"""One room for reading the fabric's tools (issue 3). Importing this package
registers every parser in :data:`tuning.parsers.base.REGISTRY`.

Use :func:`parse` (``parse("ib_write_bw", text)``) or the per-tool functions.
"""

from tuning.errors import InputError
from tuning.parsers.base import CONTEXT, REGISTRY, Finding, Parsed, ParseError, Quantity, ToolFailure, require_text  # noqa: F401

# Each parser module registers itself on import; add new modules here.
import importlib as _importlib
import pkgutil as _pkgutil

for _m in _pkgutil.iter_modules(__path__):
    if _m.name != "base":
        _importlib.import_module(f"{__name__}.{_m.name}")


def parse(tool: str, text: str, context: dict[str, str] | None = None) -> Parsed:
    """Parse ``text`` as the output of ``tool``, then apply ``context`` (see :data:`tuning.parsers.base.CONTEXT`).

    Args:
        tool: a name of :data:`tuning.parsers.base.REGISTRY` (``ib_write_bw``, ``interrupts``...).
        text: the output as captured.
        context: facts the output does not hold, e.g. ``{"bdf": "0000:c1:00.0", "local_cpus": "16-31"}``.

    Raises:
        InputError: ``tool`` is not a known tool name (lists the allowed names), or a context key
            the tool does not take (lists those it does), or a bad context value.
        ParseError: the output cannot be read (names the line and what was expected).
    """
    if tool not in REGISTRY:
        raise InputError("TOOL", "tool", f"unknown tool {tool!r}; allowed: {', '.join(sorted(REGISTRY))}")
    keys, fn = CONTEXT.get(tool, ((), None))
    for key in context or {}:
        if key not in keys:
            allowed = ", ".join(keys) if keys else "none"
            raise InputError("--context", key, f"{tool} takes no {key!r}; context keys it takes: {allowed}")
    require_text(tool, text)
    result = REGISTRY[tool](text)
    if context and fn is not None:
        result.findings = fn(result, dict(context))
    return result
