"""Secrets: PEM private key blocks and API token formats.

Formats (each as the gitleaks default rules describe it,
github.com/gitleaks/gitleaks ``config/gitleaks.toml``, and the vendor's docs):

===============  ==========================================================  =====================================
rule             shape                                                       documented by
===============  ==========================================================  =====================================
private key      ``-----BEGIN [..] PRIVATE KEY[ BLOCK]-----`` to its END      RFC 7468 (PEM), RFC 4880 (PGP armor);
                 line (RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP ...)             gitleaks ``private-key``
AWS key id       ``AKIA``/``ASIA``/``ABIA``/``ACCA``/``A3T?`` + 16 of A-Z2-7   AWS IAM "unique identifiers";
                                                                              gitleaks ``aws-access-token``
GitHub           ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_`` + 36 alnum;    GitHub "About authentication"
                 ``github_pat_`` + 82 word characters                        (token formats, 2021); gitleaks
                                                                              ``github-pat``, ``github-fine-grained-pat``
Slack            ``xox[abprs]-`` + digit groups and an alnum tail            Slack "Token types"; gitleaks
                                                                              ``slack-bot-token``, ``slack-user-token``
Google API key   ``AIza`` + 35 of ``A-Za-z0-9_-``                            Google Cloud "API keys"; gitleaks ``gcp-api-key``
OpenAI           ``sk-`` + 20 alnum + ``T3BlbkFJ`` + 20 alnum (legacy);      gitleaks ``openai-api-key``
                 ``sk-proj-``/``sk-svcacct-``/``sk-admin-`` + 40+ chars
Stripe           ``sk_live_``/``rk_live_`` + 20+ alnum                       Stripe "API keys"; gitleaks ``stripe-access-token``
===============  ==========================================================  =====================================

A PEM block without its END line (cut text) is replaced up to the end of
its base64 lines. The AWS documentation's example key id
(``AKIAIOSFODNN7EXAMPLE``, and any id ending in ``EXAMPLE``) is kept, as the
documentation IP ranges are. Value: the matched text. O(len(text)): the
text is first tested for the literal prefixes (``str`` search) and each
regex runs only when one is there.
"""

from __future__ import annotations

import re

from stages.pii.found import Found

_PEM_HEAD = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
# a block without its END line (cut text): the header and base64 lines (a
# blank line only before more base64)
_PEM_BODY = re.compile(r"(?:\r?\n(?:[A-Za-z0-9+/=]{16,}|[A-Za-z\-]+: [^\r\n]*|(?=\r?\n[A-Za-z0-9+/=]{16,})))+")
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z2-7]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{36}"
    r"|github_pat_\w{82}"
    r"|xox[abprs]-[0-9]{8,13}-[0-9A-Za-z\-]{8,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{40,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})"
    r"|[sr]k_live_[0-9A-Za-z]{20,}"
    r")(?![A-Za-z0-9_\-])", re.ASCII)
_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "gh", "github_pat_", "xox", "AIza", "sk-", "k_live_")


def find(text: str) -> list[Found]:
    """Private key blocks and API tokens in ``text`` (value: the matched text)."""
    out: list[Found] = []
    if "PRIVATE KEY" in text:
        out.extend(_pem_blocks(text))
    if any(p in text for p in _PREFIXES):
        for m in _TOKENS.finditer(text):
            if not m.group(0).endswith("EXAMPLE"):
                out.append(Found(m.start(), m.end(), m.group(0)))
    return out


def _pem_blocks(text: str) -> list[Found]:
    """PEM blocks: each header to the first END line of its label after it,
    else over its base64 lines. The END position found for a label is kept
    (and "none" is final), so many headers without an END line cost
    O(len(text)) in all, not a scan to the end of the text per header."""
    out: list[Found] = []
    next_end: dict[str, int] = {}
    pos = 0
    while (m := _PEM_HEAD.search(text, pos)) is not None:
        marker = f"-----END {m.group(1)}-----"
        at = next_end.get(marker)
        if at is None or at != -1 and at < m.end():
            at = next_end[marker] = text.find(marker, m.end())
        if at != -1:
            stop = at + len(marker)
        else:
            body = _PEM_BODY.match(text, m.end())
            stop = body.end() if body is not None else -1
        if stop == -1:
            pos = m.start() + 1
            continue
        out.append(Found(m.start(), stop, text[m.start():stop]))
        pos = stop
    return out
