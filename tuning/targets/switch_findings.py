"""What a switch shows at collect that a plan does not change but an operator must see (issues 21, 19).

``switch-port-down``: a port the switch's configuration carries (a ``port/<swp>/mtu`` key of the
rendered candidate, :func:`tuning.targets.switch.desired`) that the switch itself reads down, admin
or oper (the NVUE driver's ``down_ports``, from the State / Admin Status / Oper Status columns of
``nv show interface``: CumulusNetworks/docs ``Interface-Configuration-and-Management`` pages). The link
behind it carries no traffic whatever the plan sets, and the node at its far end may still show its
own NIC up. Ports the configuration does not carry (unused, uncabled) are not reported.

``switch-drift``: a ``manage: false`` switch (read, never written) that does not hold a setting its
inventory entry says it has, or runs another operational MTU (:func:`drift_findings`): the lint's
cross-device rules and the verification took the inventory's word for it.

The fabric lint's live rules (``live-pfc``, ``live-trust``, ``live-dscp-map``, ``ecn-off``,
``live-mtu``: :mod:`tuning.lint`) over the switches a plan or rollout collected
(:func:`lint_findings`): the lint is the first step of every plan and rollout, and a report's
findings after a push are read from the switches as the run left them (a setting the switch took
but does not act on shows there, not only in ``fabtune lint``).
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


def drift_findings(switch: str, wanted: dict[str, str], held: dict[str, str], oper_mtu: dict[str, int],
                   port_of) -> list[Finding]:
    """``switch-drift`` findings of a ``manage: false`` switch: each port whose operational MTU is not
    the wanted one (an MTU the configuration leaves unset runs the OS default, so the operational one
    decides), and each other setting of the inventory's rendered configuration the switch does not hold.

    Args:
        switch: inventory name.  wanted: the rendered configuration's flat settings (key -> value,
            :func:`tuning.targets.switch.desired`).  held: the applied configuration's flat settings
            (the driver's ``config_settings`` of its running configuration).  oper_mtu: port ->
            operational MTU (bytes).  port_of: key -> its port for a port MTU key, else None.

    Returns:
        One finding per drifted key (domain ``switch``), in the rendered configuration's order; the
        evidence names the value read ("not set" when the switch holds none).
    """
    out = []
    why = "fabtune does not write this switch (manage: false)"
    for key, want in wanted.items():
        port, have = port_of(key), held.get(key)
        if port is not None and port in oper_mtu:  # a port's MTU: what it runs (an unset one runs the OS default)
            if str(oper_mtu[port]) != want:
                out.append(Finding(switch, "switch", "switch-drift", f"{port}: the port runs another MTU than its "
                                   f"inventory entry says; {why}",
                                   evidence=f"{port}: operational MTU {oper_mtu[port]}, configured "
                                            f"{have if have is not None else 'not set'}, inventory {want}"))
        elif have != want:
            out.append(Finding(switch, "switch", "switch-drift", f"{key}: the switch holds another value than its "
                               f"inventory entry says; {why}",
                               evidence=f"{key}: applied {have if have is not None else 'not set'}, inventory {want}"))
    return out


def lint_findings(devices: dict, states: dict) -> list[Finding]:
    """The live lint rules (:func:`tuning.lint.live_findings`) over the collected switches.

    Args:
        devices: the inventory, name -> Device (the nodes' ``nic_qos``, MTU and cabling).
        states: switch name -> its collected :class:`tuning.switch.base.SwitchState` (only the
            run's switches: a rule about a switch outside the run is not checked here).

    Returns:
        One finding (domain ``switch``, code the rule id) per broken rule, about the switch it was
        read from; the message ends with the rule's fix, the evidence names the setting read.
    """
    from tuning.lint import live_findings

    out = []
    for f in live_findings(devices, states):
        switch = next(d for d in f.devices if d in states)
        out.append(Finding(switch, "switch", f.rule, f"{f.message}; fix: {f.fix}", evidence=f"{f.source}: {f.key}"))
    return out
