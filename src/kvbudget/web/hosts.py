"""Which Host headers a ``kvbudget serve`` answers (the DNS-rebinding check), for every bound address.

A page elsewhere reaches a local server through a DNS name it controls, pointed at the server's address: the
browser then sends that *name* as Host. So a name is answered only when it is this server's own (``localhost``,
or the name given to ``--host``), and an address literal only when it can be this server: on a loopback bind,
a loopback address in any spelling the resolver takes (``127.1``, ``127.0.0.2``, ``0x7f.0.0.1``, ``2130706433``,
``0177.0.0.1``, ``[::1]``, ``[::ffff:127.0.0.1]``), ``localhost`` with or without its final dot, any case; on any
other bind, any address literal (no rebinding goes through one) and ``localhost``.
"""

from __future__ import annotations

import ipaddress
import re

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# inet_aton's spellings: one to four parts, each decimal, octal (leading 0) or hex (0x); checked here, because
# the C function also takes trailing text after a space
_INET_ATON = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]+)){0,3}$", re.ASCII | re.IGNORECASE)
LOCAL_NAMES = frozenset({"localhost"})


def address(name: str) -> Address | None:
    """The IP address ``name`` spells (any inet_aton spelling of IPv4, a bracketed or bare IPv6), or None."""
    text = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        pass
    if not _INET_ATON.match(text):
        return None
    import socket

    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


def is_loopback_address(ip: Address) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a ``--host`` value or a Host header's name) is this machine only."""
    name = host.strip().lower()
    if name.rstrip(".") in LOCAL_NAMES:
        return True
    ip = address(name)
    return ip is not None and is_loopback_address(ip)


def split_host(header: str) -> str | None:
    """The name of a Host header (``[::1]:8731`` -> ``[::1]``, ``localhost:8731`` -> ``localhost``), or None if it
    is not a Host header at all."""
    if not header or len(header) > 300 or any(c.isspace() or ord(c) < 33 for c in header):
        return None
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1 :] if end > 0 else "?"
        if rest and not re.match(r"^:[0-9]{1,5}$", rest):
            return None
        return header[: end + 1]
    name, colon, port = header.rpartition(":")
    if not colon:
        return header
    return name if re.match(r"^[0-9]{1,5}$", port) and name else None


class HostPolicy:
    """The Host headers a server bound to ``bound`` (its ``--host``) answers."""

    def __init__(self, bound: str | None) -> None:
        self.any = bound is None  # a test's or embedder's choice: no check
        self.loopback = bound is not None and is_loopback(bound)
        self.names = LOCAL_NAMES | ({bound.strip().lower().rstrip(".")} if bound and address(bound) is None else set())

    def allows(self, header: str) -> bool:
        if self.any:
            return True
        host = split_host(header)
        if host is None:
            return False
        name = host.lower()
        if name.rstrip(".") in self.names:
            return True
        ip = address(name)
        if ip is None:
            return False
        return is_loopback_address(ip) if self.loopback else True
