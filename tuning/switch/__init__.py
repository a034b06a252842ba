"""Switch drivers behind one contract (:mod:`tuning.switch.base`), one module per network OS.

``DRIVERS`` maps an inventory platform name to its driver class.
"""

from tuning.switch.base import Capabilities, RoceState, SwitchDriver, SwitchState  # noqa: F401
from tuning.switch.nvue import NvueDriver

DRIVERS: dict[str, type[SwitchDriver]] = {"nvue": NvueDriver, "cumulus_linux": NvueDriver}
