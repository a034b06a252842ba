"""Switch drivers behind one contract (:mod:`tuning.switch.base`), one module per network OS.

:func:`driver_class` resolves an inventory platform to its driver class from
:data:`tuning.model.platforms.SWITCH_DRIVERS` (imported on first use).
"""

from __future__ import annotations

import importlib

from tuning.model.platforms import SWITCH_DRIVERS
from tuning.switch.base import Capabilities, RoceState, SwitchDriver, SwitchState  # noqa: F401


def driver_class(platform: str) -> type[SwitchDriver]:
    """The driver class of switch ``platform``.

    Raises:
        KeyError: no driver serves ``platform`` (the inventory model refuses such a platform at load).
    """
    entry = SWITCH_DRIVERS[platform]
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = SWITCH_DRIVERS[platform] = getattr(importlib.import_module(module), attr)
    return entry  # type: ignore[return-value]
