"""The device platforms fabtune can drive: the one list the inventory model, the switch driver
registry (:func:`tuning.switch.driver_class`) and the target registry (:mod:`tuning.targets`) read.

A switch platform names its OS driver class as ``module:Class`` (imported when first used, so a
node-only run never imports a switch OS's SSH library). ``cumulus_linux`` is Ansible's
``ansible_network_os`` name of the same NVUE OS (Cumulus Linux 5.x).
"""

from __future__ import annotations

#: switch platform -> its driver (a SwitchDriver class, or its ``module:Class`` path)
SWITCH_DRIVERS: dict[str, object] = {
    "nvue": "tuning.switch.nvue:NvueDriver",
    "cumulus_linux": "tuning.switch.nvue:NvueDriver",
}
#: node platforms (every node is a Linux host reached over SSH today)
NODE_PLATFORMS: tuple[str, ...] = ("linux",)


def check_switch_platform(value: object) -> str:
    """``value`` when a switch driver serves it.

    Raises:
        ValueError: naming the allowed platforms (the model turns it into an InputError).
    """
    if not isinstance(value, str) or value not in SWITCH_DRIVERS:
        raise ValueError(f"{value!r:.40} is not a switch platform fabtune drives; allowed: {', '.join(SWITCH_DRIVERS)}")
    return value
