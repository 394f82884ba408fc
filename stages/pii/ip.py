"""Public IPv4 and IPv6 addresses.

``ipaddress`` (standard library) parses and classifies; an address is
replaced only when ``is_global`` holds (IANA special-purpose registries,
RFC 6890): private (10/8, 172.16/12, 192.168/16, fc00::/7), loopback
(127/8, ::1), link-local (169.254/16, fe80::/10), shared (100.64/10) and
the documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
RFC 5737; 2001:db8::/32, RFC 3849) are kept. Python's ``ipaddress`` rejects
IPv4 octets with leading zeros (``01.02.03.04``), as the RFC 6943 section
3.1.1 advice on ambiguous forms.

Guards against what only looks like an address:

* IPv4: four dot-separated numbers not inside a longer dotted run (OIDs
  ``1.3.6.1.4.1``, section numbers ``2.3.1.4.5``) or a word; kept when a
  version word stands right before it (``version 1.2.3.4``, ``v 1.2.3.4``,
  ``ver. 1.2.3.4``, ``release 2.0.1.3``, ``版本 1.2.3.4``: a four-part version,
  not an address); and kept when all four numbers are single digits
  (``1.2.3.4``, ``8.8.8.8``, ``9.9.9.9``: examples, section numbers and the
  public resolvers everybody names, never a person's address); kept when it
  starts a line and a dot follows it (``12.6.2.1. Compile``: a section
  heading); kept when its last number is 0 (``130.155.160.0``: a network,
  as in ``route add -net`` and netmask examples, not a host).
* IPv6: only addresses of the global unicast block 2000::/3 (RFC 4291 section
  2.4, the only block IANA allocates from; its first group is 4 hex digits
  starting with 2 or 3), so ``a::b`` in a slice, ``dead::beef`` and C++
  ``std::`` are never candidates; a compressed address needs two groups
  before ``::`` (registries allocate /32 and longer prefixes:
  ``2001:4860::``, ``2a00:1450::``), so the Python/numpy slices
  ``arr[2048::2]``, ``x[2024::2]`` in code quoted in prose are not addresses.

Value: the address in ``ipaddress``'s compressed form. O(len(text)).
"""

from __future__ import annotations

import ipaddress
import re

from stages.pii.found import Found

_V4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)", re.ASCII)
_V6 = re.compile(r"(?<![\w:.])[23][0-9A-Fa-f]{3}:[0-9A-Fa-f:]{2,35}(?![\w:]|\.\d)", re.ASCII)
_VERSION_BEFORE = re.compile(r"(?:\b(?:version|ver\.?|v|rel(?:ease)?\.?)|版本(?:号)?)\s*[:：=]?\s*$", re.IGNORECASE)
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not address.is_multicast


def find(text: str) -> list[Found]:
    """Public IP addresses in ``text`` (value: compressed form)."""
    out: list[Found] = []
    if "." in text:
        for m in _V4.finditer(text):
            written = m.group(0)
            parts = written.split(".")
            if all(len(part) == 1 for part in parts) or parts[-1] == "0":
                continue
            if text.startswith(".", m.end()) and not text[text.rfind("\n", 0, m.start()) + 1:m.start()].strip():
                continue
            try:
                address = ipaddress.IPv4Address(written)
            except ValueError:
                continue
            if _public(address) and not _VERSION_BEFORE.search(text, max(0, m.start() - 16), m.start()):
                out.append(Found(m.start(), m.end(), str(address)))
    if "::" in text or text.count(":") >= 7:
        for m in _V6.finditer(text):
            written = m.group(0).rstrip(":") if not m.group(0).endswith("::") else m.group(0)
            if "::" in written and ":" not in written.split("::", 1)[0]:
                continue  # one group before "::": a slice (arr[2048::2]), not an allocated /32
            try:
                address = ipaddress.IPv6Address(written)
            except ValueError:
                continue
            if address in _GLOBAL_UNICAST and _public(address):
                out.append(Found(m.start(), m.start() + len(written), address.compressed))
    return out
