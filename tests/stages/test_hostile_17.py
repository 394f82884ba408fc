"""Hostile input against the decontaminate and pii stages (issue 17): each
test is an input shape that real bug reports of peer projects show arriving
(catastrophic regex scans, full-width digits, eval files with a BOM or bad
bytes), with the value the stage must give."""

from __future__ import annotations

from stages.pii import secrets

PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
       "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END RSA PRIVATE KEY-----")


def test_many_pem_headers_without_end_lines_are_one_linear_scan():
    # 20,000 headers without an END line (a key parser's test data, a log of
    # truncated dumps): the former lazy ``.*?-----END`` regex scanned to the
    # end of the text from each header (O(n^2): ~40 s for these 640 K chars).
    junk = "-----BEGIN EC PRIVATE KEY-----," * 20_000
    text = junk + "\n" + PEM + "\nrevoked"
    found = secrets.find(text)
    assert [(f.start, f.end) for f in found] == [(len(junk) + 1, len(junk) + 1 + len(PEM))]
    assert found[0].value == PEM
    # a header whose END comes later takes the text up to it, as before
    assert [(f.start, f.end) for f in secrets.find("-----BEGIN EC PRIVATE KEY-----" + PEM + "-----END EC PRIVATE KEY-----")] \
        == [(0, 30 + len(PEM) + 28)]
