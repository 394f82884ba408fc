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
  not an address), or a word of :data:`VERSION_WORDS` (software, kernels,
  firmware and builds: ``kernel 5.15.0.105``, ``SDK 2.14.3.118``, ``Oracle
  19.3.0.1``, ``固件 2.4.10.17``, ``内核 5.15.0.105``); kept when it is glued to
  a package name or a version operator before it (``nginx/1.25.3.1``,
  ``openssl-1.1.1.4``: a word character then ``/`` or ``-``; ``foo==2.14.3.118``,
  ``>=``, ``<=``, ``~=``, ``!=``: PEP 440 comparison operators) or to a version
  suffix after it (``5.15.0.105-generic``, ``-rc1``: ``-`` and a letter;
  ``1.2.3.4+dfsg``, ``1.2.3.4~rc1``: Debian and semver build/pre-release
  marks) or to a Debian epoch before it (``[1:2.10.2.3]`` in aptitude's
  output). A plain ``=`` is no guard (``Remote=192.169.224.239``, ``ip=``,
  ``server=`` in the man pages are addresses), nor ``@`` (``dig @128.9.0.32``,
  ``~user@217.89.81.34`` in IRC logs), nor ``//`` (``http://61.135.169.125/``).
  Kept when all four numbers are single digits (``1.2.3.4``, ``8.8.8.8``,
  ``9.9.9.9``: examples, section numbers and the public resolvers everybody
  names, never a person's address); kept when it starts a line, or follows
  an HTML tag's ``>``, and a dot follows it (``12.6.2.1. Compile``,
  ``<span>5.10.3.3. </span>``: a section heading); kept when its last number
  is 0 (``130.155.160.0``: a network, as in ``route add -net`` and netmask
  examples, not a host). Measured before/after on both development corpora:
  docs/stages/pii.md, "Four-part versions".
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
#: Words after which a dotted quad is a version number, not an address: the
#: version words themselves, and what carries four-part versions (kernels,
#: SDKs, firmware, builds, databases, browsers, servers). Our own list, from
#: the strings a user found replaced (issue 17) and the version lines of the
#: development corpus; a word here never introduces an address in
#: ../shared/corpus (docs/stages/pii.md, "Measured").
VERSION_WORDS = (
    "version", "ver", "v", "rel", "release", "revision", "rev", "build", "kernel", "linux", "sdk", "ndk",
    "jdk", "jre", "firmware", "fw", "bios", "driver", "patch", "oracle", "mysql", "postgresql", "nginx",
    "apache", "openssl", "python", "java", "chrome", "chromium", "firefox", "safari", "windows",
    "android", "ios", "macos", "版本", "版本号", "固件", "内核", "驱动", "补丁", "系统版本", "软件版本")
_VERSION_BEFORE = re.compile(
    r"(?:(?<![A-Za-z])(?:" + "|".join(sorted((w for w in VERSION_WORDS if w.isascii()), key=len, reverse=True))
    + r")\.?|" + "|".join(sorted((w for w in VERSION_WORDS if not w.isascii()), key=len, reverse=True))
    + r")\s*[:：=]?\s*$", re.IGNORECASE)
#: Glued before the quad: a word character and ``/`` or ``-`` (``nginx/``,
#: ``openssl-``), a PEP 440 comparison operator (``==``, ``>=``, ``~=`` ...),
#: or a Debian epoch (``1:2.10.2.3``: 1-2 digits and ``:`` not after a digit,
#: dot or colon, so ``193.8.232.2:193.8.232.7`` stays two addresses).
_GLUED_BEFORE = re.compile(r"(?:[A-Za-z0-9_][/\-]|[=<>~!]=|(?<![\w.:])\d{1,2}:)$")
#: Glued after the quad: ``-`` and a letter (``-generic``, ``-rc1``), ``+`` or ``~``.
_GLUED_AFTER = re.compile(r"-[A-Za-z]|[+~]")
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
            if text.startswith(".", m.end()) and (
                    not text[text.rfind("\n", 0, m.start()) + 1:m.start()].strip()
                    or text[:m.start()].rstrip(" ").endswith(">")):
                continue
            try:
                address = ipaddress.IPv4Address(written)
            except ValueError:
                continue
            if not _public(address) or _GLUED_AFTER.match(text, m.end()) \
                    or _GLUED_BEFORE.search(text, max(0, m.start() - 4), m.start()) \
                    or _VERSION_BEFORE.search(text, max(0, m.start() - 16), m.start()):
                continue
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
