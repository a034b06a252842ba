"""What a switch shows at collect that a plan does not change but an operator must see (issue 21).

``switch-port-down``: a port the switch's configuration carries (a ``port/<swp>/mtu`` key of the
rendered candidate, :func:`tuning.targets.switch.desired`) that the switch itself reads down, admin
or oper (the NVUE driver's ``down_ports``, from the State / Admin Status / Oper Status columns of
``nv show interface``: CumulusNetworks/docs ``Interface-Configuration-and-Management`` pages). The link
behind it carries no traffic whatever the plan sets, and the node at its far end may still show its
own NIC up. Ports the configuration does not carry (unused, uncabled) are not reported.
"""

from __future__ import annotations

from tuning.node.base import Finding


def port_findings(switch: str, wanted: set[str], down: dict[str, str]) -> list[Finding]:
    """Findings for the ``wanted`` ports that are ``down``.

    Args:
        switch: inventory name.  wanted: the ports the switch's configuration carries.
        down: port -> ``"admin down"`` or ``"oper down"`` as the driver read it.

    Returns:
        One ``switch-port-down`` finding (domain ``switch``) per such port, by port name.
    """
    return [Finding(switch, "switch", "switch-port-down", f"{port} is {why} on the switch: its link carries no traffic",
                    evidence=f"nv show interface: {port} {why}") for port, why in sorted(down.items()) if port in wanted]
