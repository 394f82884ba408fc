"""E-mail addresses.

The address shape is RFC 5322's dot-atom (section 3.4.1) restricted to what
people write in running text: a local part of ``A-Z a-z 0-9 . _ % + -``
(at most 64 characters, RFC 5321 section 4.5.3.1.1) and a domain of ASCII
labels ending in an alphabetic top-level label of 2-24 letters. Quoted local
parts, IP-literal domains and internationalised (non-ASCII) domains are not
detected.

Kept (not personal): the domains reserved for documentation and testing,
``example.com/.net/.org`` and any name under ``.example``, ``.test``,
``.invalid``, ``.localhost`` (RFC 2606 section 2-3, RFC 6761 section 6).

Also kept: names whose last label is a systemd unit type or a configuration
file suffix (:data:`NOT_MAIL_SUFFIXES`: ``getty@tty1.service``,
``user@1000.service``, ``journald@NAMESPACE.conf``): instance units and
files with an ``@`` in their name, frequent in man pages (measured on
``../shared/corpus``: docs/stages/pii.md); and asset names (``image@2x.png``,
the retina-image convention of iOS and the web). None of these is a top-level
domain that mail is sent to. The local part ``git`` (:data:`SERVICE_LOCAL_PARTS`,
``git clone git@github.com:org/repo.git``) is a host's SSH account, kept.

Speed: the text is searched for ``@`` with ``str.find``; only there is the
local part walked back and the domain matched (a regex that started at every
character would cost ~20x more on text without addresses). O(len(text)).
"""

from __future__ import annotations

import re

from stages.pii.found import Found

_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_MAX_LOCAL = 64
_DOMAIN = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24})"
                     r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])")
RESERVED_DOMAINS = ("example.com", "example.net", "example.org")
RESERVED_TLDS = frozenset({"example", "test", "invalid", "localhost"})
#: systemd unit types (systemd.unit(5)) and file suffixes seen after an "@".
NOT_MAIL_SUFFIXES = frozenset({"service", "socket", "timer", "mount", "automount", "slice", "scope", "device",
                               "swap", "path", "target", "conf", "journal",
                               # asset and file suffixes, none a delegated TLD (IANA root zone; .py, .md,
                               # .pl, .sh, .zip, .mov ARE TLDs and stay out): image@2x.png, icon@3x.webp
                               "png", "jpg", "jpeg", "gif", "webp", "svg", "ico", "bmp", "tiff", "avif", "heic",
                               "css", "js", "json", "html", "htm", "xml", "yaml", "yml", "txt", "pdf", "ttf",
                               "otf", "wav", "ogg", "webm"})
#: Local parts of service accounts, not people: ``git@github.com:org/repo.git``
#: (the SSH user of every git host) in clone commands.
SERVICE_LOCAL_PARTS = frozenset({"git"})


def reserved(domain: str) -> bool:
    """Whether ``domain`` (lower case) is reserved for documentation or
    tests, or ends in one of :data:`NOT_MAIL_SUFFIXES`."""
    if domain.rsplit(".", 1)[-1] in RESERVED_TLDS or domain.rsplit(".", 1)[-1] in NOT_MAIL_SUFFIXES:
        return True
    return any(domain == d or domain.endswith("." + d) for d in RESERVED_DOMAINS)


def find(text: str) -> list[Found]:
    """E-mail addresses in ``text`` (value: the address in lower case).

    A local part is walked back from each ``@`` over :data:`_LOCAL_CHARS`
    (leading dots skipped; none left: no address); the domain must follow the
    ``@`` directly."""
    out: list[Found] = []
    at = text.find("@")
    while at != -1:
        start = at
        while start > 0 and at - start < _MAX_LOCAL and text[start - 1] in _LOCAL_CHARS:
            start -= 1
        while start < at and text[start] == ".":
            start += 1
        m = _DOMAIN.match(text, at + 1) if start < at and text[at - 1] != "." else None
        if m is not None:
            domain = m.group(0).lower()
            if not reserved(domain) and text[start:at].lower() not in SERVICE_LOCAL_PARTS:
                out.append(Found(start, m.end(), text[start:at].lower() + "@" + domain))
            at = text.find("@", m.end())
        else:
            at = text.find("@", at + 1)
    return out
