"""Rebooting a node on a front end's explicit permission (the Ansible playbooks' reboot handler,
``fabtune_allow_reboot``): settings whose :attr:`~tuning.node.base.Change.effect` is
``reboot_required`` (the kernel command line) are active only after it.
"""

from __future__ import annotations

import time

from tuning.errors import CommandError, ConnectError, DeviceTimeout
from tuning.inventory import Device
from tuning.model.policy import RolloutPolicy
from tuning.rollout.steps import _connect

#: the command that reboots a node (systemd's ``systemctl reboot``, systemctl(1)); run through sudo
REBOOT_CMD = "systemctl reboot"


def reboot(dev: Device, policy: RolloutPolicy, wait_s: float = 900.0, poll_s: float = 5.0) -> dict:
    """Reboot one node (``systemctl reboot`` as root) and wait until it answers on SSH again.

    Only a front end's explicit permission calls this (Ansible: ``fabtune_allow_reboot``); a
    pushed setting whose :attr:`~tuning.node.base.Change.effect` is ``reboot_required`` is active
    after it. The session dropping while the command runs is the reboot, not an error.

    Returns:
        ``{"rebooted": True, "seconds": float}``.

    Raises:
        CommandError: the command was refused (the session stayed up).
        DeviceTimeout: no SSH answer within ``wait_s`` seconds.
    """
    t0 = time.monotonic()
    conn = _connect(dev, policy.timeouts.connect_s)
    try:
        res = conn.run(REBOOT_CMD, timeout=60.0)
        if res.rc != 0:
            raise CommandError(REBOOT_CMD, res.rc, res.stderr or res.stdout, host=dev.name, phase="reboot")
    except (ConnectError, DeviceTimeout, OSError, EOFError):
        pass  # the node went down under the session
    finally:
        conn.close()
    time.sleep(poll_s)
    while True:
        try:
            _connect(dev, policy.timeouts.connect_s).close()
            return {"rebooted": True, "seconds": round(time.monotonic() - t0, 1)}
        except (ConnectError, DeviceTimeout):
            if time.monotonic() - t0 > wait_s:
                raise DeviceTimeout(dev.name, "reboot", wait_s) from None
            time.sleep(poll_s)
