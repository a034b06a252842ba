"""A NIC's IPv4 address with its prefix length (``NicSpec.ipv4``), read as :mod:`ipaddress` reads it.

A fleet of 10,000 nodes has 80,000 of them: the canonical spelling ``A.B.C.D/N`` is built from its
numbers (a third of the cost of ``ipaddress`` parsing the text), any other spelling by ``ipaddress``
itself, and the network / broadcast test is done on the integer, so the result and every refusal are
``ipaddress``'s.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Interface, IPv4Network

#: what a NIC's ``ipv4`` may be, as error messages say it
IPV4_ALLOWED = ("a host address with its prefix length like 10.0.0.1/24 (not the network or broadcast "
                "address of its subnet; /31 and /32 have neither)")


def check_nic_ipv4(value: object) -> IPv4Interface:
    """A NIC address: ``A.B.C.D/N``, the prefix written out (a bare address would be a /32, no
    on-link peers) and not the subnet's network or broadcast address (for prefixes up to /30).

    Raises:
        ValueError: not a string, not an address ``ipaddress`` reads, no prefix length, or the
            network / broadcast address; the message names :data:`IPV4_ALLOWED`.
    """
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string; allowed: {IPV4_ALLOWED}")
    try:
        iface = _ipv4_interface(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address; allowed: {IPV4_ALLOWED}") from None
    if "/" not in value:
        raise ValueError(f"{value!r} has no prefix length; allowed: {IPV4_ALLOWED}")
    net = iface.network
    hostmask = (1 << 32 - net.prefixlen) - 1
    if net.prefixlen <= 30 and int(iface) & hostmask in (0, hostmask):  # the network or broadcast address
        what = "network" if int(iface) & hostmask == 0 else "broadcast"
        raise ValueError(f"{value!r} is the {what} address of {net}; allowed: {IPV4_ALLOWED}")
    return iface


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: ``A.B.C.D/N`` as ``ipaddress`` reads it, in its one canonical spelling (no leading zeros, N 0..32)
_CANONICAL_IPV4 = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}/([12]?[0-9]|3[0-2])")


def _ipv4_interface(value: str) -> IPv4Interface:
    """``IPv4Interface(value)``: a canonical ``A.B.C.D/N`` built from its numbers (a third of the
    cost of parsing the text again; 80,000 NICs at 10,000 nodes), any other spelling by
    ``ipaddress`` itself, which accepts or refuses it. Raises ValueError as ``ipaddress`` does."""
    m = _CANONICAL_IPV4.fullmatch(value)
    if m is None:
        return IPv4Interface(value)
    a, b, c, d, prefix = map(int, m.groups())
    return shared_interface(a << 24 | b << 16 | c << 8 | d, prefix)


#: subnets by (network number, prefix length): the NICs of one leaf share one (80,000 NICs, ~2,500 subnets)
_NETWORKS: dict[tuple[int, int], IPv4Network] = {}
_NETWORKS_MAX = 1 << 16


def shared_interface(ip: int, prefix: int) -> IPv4Interface:
    """``IPv4Interface((ip, prefix))`` sharing its subnet's ``IPv4Network`` with the other NICs of
    that subnet (a tenth of the cost: building the network is most of the constructor's work). The
    object holds what ``IPv4Interface.__init__`` sets (CPython 3.8-3.13 ``ipaddress``); a Python whose
    ``ipaddress`` differs is detected at import (:data:`_SHARED_NETWORKS`) and gets the constructor."""
    if not _SHARED_NETWORKS:
        return IPv4Interface((ip, prefix))
    key = (ip >> (32 - prefix) if prefix else 0, prefix)
    net = _NETWORKS.get(key)
    if net is None:
        net = IPv4Network((ip, prefix), strict=False)
        if len(_NETWORKS) < _NETWORKS_MAX:
            _NETWORKS[key] = net
    iface = object.__new__(IPv4Interface)
    iface._ip, iface.network, iface.netmask, iface._prefixlen = ip, net, net.netmask, prefix
    return iface


def _same_as_constructor() -> bool:
    """Whether :func:`shared_interface` gives what ``IPv4Interface`` gives (equal, same text, hash,
    network, attributes) on this Python: checked once at import."""
    global _SHARED_NETWORKS
    _SHARED_NETWORKS = True
    try:
        for ip, prefix in ((0x0A000101, 24), (0xC0A80001, 31), (0x01020304, 32), (0x0A000001, 0)):
            ours, theirs = shared_interface(ip, prefix), IPv4Interface((ip, prefix))
            if (ours != theirs or str(ours) != str(theirs) or hash(ours) != hash(theirs) or ours.network != theirs.network
                    or vars(ours) != vars(theirs) or ours.ip != theirs.ip):
                return False
        return True
    except Exception:  # noqa: BLE001 (any difference in the internals: use the constructor)
        return False
    finally:
        _NETWORKS.clear()


_SHARED_NETWORKS = False
_SHARED_NETWORKS = _same_as_constructor()
