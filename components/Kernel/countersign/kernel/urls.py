"""Which URLs a connector may call: http(s) only, never a link-local or cloud-metadata address.

Invariant (GLOBAL_SPEC §10, PluginRegistry SPEC): a registry constant or template, or a base URL
a deployment sets, cannot point n8n's HTTP Request node at a local file (``file://``), at the
link-local range (169.254.0.0/16, fe80::/10) or at a cloud's instance-metadata service (AWS
169.254.169.254 and fd00:ec2::254, Alibaba 100.100.100.200, GCP metadata.google.internal),
whose answers are credentials. The host is read as a URL parser reads it, in every spelling
that reaches the same address: decimal (``2852039166``), hex (``0xa9fea9fe``), octal
(``0251.0376.0251.0376``), short forms (``169.254.43518``), IPv4-mapped / -compatible / NAT64 /
6to4 IPv6, a trailing dot, any letter case. Whitespace, backslashes (``http://x\\@h`` is ``x``
to one parser and ``h`` to another), control characters and percent-encoded hosts are refused
outright. A host the Policy names in ``allow_hosts`` is allowed (a deployment that really
serves a connector there). Pure: no DNS (a name that resolves to such an address is the
network's to block; the names above are refused by name).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Collection, Iterator
from urllib.parse import urlsplit

__all__ = ["METADATA_HOSTS", "url_refusal"]

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

#: instance-metadata services by name and by address (beyond the link-local range)
METADATA_HOSTS: frozenset[str] = frozenset(
    {
        "metadata.google.internal",
        "metadata.goog",
        "metadata",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)
_METADATA_IPS: frozenset[IP] = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LEGACY_V4 = re.compile(r"[0-9a-fx.]+")


def url_refusal(url: str, *, allow_hosts: Collection[str] = ()) -> str | None:
    """Why a connector may not call ``url`` (module docstring), or None when it may."""
    try:
        host = _host(url)
    except _RefusedError as e:
        return str(e)
    ip = _address(host)
    allowed = {h.lower().rstrip(".") for h in allow_hosts}
    if host in allowed or (ip is not None and str(ip) in allowed):
        return None
    return _metadata_or_link_local(host, ip)


class _RefusedError(Exception):
    """A URL refused before its host is looked at as an address (the message says why)."""


def _host(url: str) -> str:
    """The host an http(s) ``url`` names, as a URL parser reads it (no trailing dot); raises
    ``_RefusedError`` on anything in the way of reading it the same way every time."""
    if not url.isprintable() or re.search(r"[\s\\]", url):
        raise _RefusedError("holds whitespace, a backslash or a control character")
    try:  # an unclosed "[" (IPv6) is a ValueError of urlsplit itself
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = (parts.hostname or "").rstrip(".")
    except ValueError as e:
        raise _RefusedError("its host cannot be read") from e
    if scheme not in {"http", "https"}:
        raise _RefusedError(f"scheme {parts.scheme or 'none'!r}: only http and https URLs")
    if not host:
        raise _RefusedError("names no host")
    if "%" in host:
        raise _RefusedError(f"host {host!r} is percent-encoded")
    return host


def _metadata_or_link_local(host: str, ip: IP | None) -> str | None:
    """Why ``host`` is refused as a metadata service or a link-local address, in any spelling."""
    if host in METADATA_HOSTS:
        return f"host {host!r} is a cloud metadata service (name it in the policy's allow_hosts)"
    for view in _views(ip) if ip is not None else ():
        if view in _METADATA_IPS:
            return f"host {host!r} is the metadata address {view} (policy allow_hosts)"
        if view.is_link_local:
            return f"host {host!r} is the link-local address {view} (policy allow_hosts)"
    return None


def _address(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _LEGACY_V4.fullmatch(host):  # what inet_aton (and so most clients) accept
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def _views(ip: IP) -> Iterator[IP]:
    """The address and every IPv4 address it carries."""
    yield ip
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            yield ip.ipv4_mapped
        if ip.sixtofour is not None:
            yield ip.sixtofour
        if int(ip) < 2**32 or ip in _NAT64:
            yield ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
