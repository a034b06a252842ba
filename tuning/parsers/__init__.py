"""One room for reading the fabric's tools (issue 3). Every parser module registers itself in
:data:`tuning.parsers.base.REGISTRY` when imported; :func:`parse` and ``tuning.parsers.REGISTRY``
import them all first (:func:`load_all`), so a process that needs one parser (``from
tuning.parsers.perftest import parse_perftest``: every ``fabtune`` command) does not pay for the
twenty others (0.2 s of CPU per command).

Use :func:`parse` (``parse("ib_write_bw", text)``) or the per-tool functions.
"""

from tuning.errors import InputError
from tuning.parsers.base import CONTEXT, Finding, Parsed, ParseError, Quantity, ToolFailure, require_text  # noqa: F401
from tuning.parsers import base as _base


def load_all() -> dict:
    """Import every parser module of this package (each registers itself); returns the registry
    (tool name -> parse function)."""
    global _loaded
    if not _loaded:
        import importlib
        import pkgutil

        for m in pkgutil.iter_modules(__path__):
            if m.name != "base":
                importlib.import_module(f"{__name__}.{m.name}")
        _loaded = True
    return _base.REGISTRY


_loaded = False


def __getattr__(name: str):
    if name == "REGISTRY":  # the full registry, never a partial one
        return load_all()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    registry = load_all()
    if tool not in registry:
        raise InputError("TOOL", "tool", f"unknown tool {tool!r}; allowed: {', '.join(sorted(registry))}")
    keys, fn = CONTEXT.get(tool, ((), None))
    for key in context or {}:
        if key not in keys:
            allowed = ", ".join(keys) if keys else "none"
            raise InputError("--context", key, f"{tool} takes no {key!r}; context keys it takes: {allowed}")
    require_text(tool, text)
    result = registry[tool](text)
    if context and fn is not None:
        result.findings = fn(result, dict(context))
    return result
