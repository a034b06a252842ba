"""A NIC's IPv4 address with its prefix length (``NicSpec.ipv4``), read as :mod:`ipaddress` reads it.

A fleet of 10,000 nodes has 80,000 of them: the canonical spelling ``A.B.C.D/N`` is built from its
numbers (a third of the cost of ``ipaddress`` parsing the text), any other spelling by ``ipaddress``
itself, and the network / broadcast test is done on the integer, so the result and every refusal are
``ipaddress``'s.
"""

from __future__ import annotations

import re
from ipaddress import IPv4Interface

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
    return IPv4Interface((a << 24 | b << 16 | c << 8 | d, prefix))
