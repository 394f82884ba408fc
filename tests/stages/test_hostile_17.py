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


def _pii(tmp_path, *texts, **cfg):
    import pyarrow as pa

    from stages.base import StageContext
    from stages.pii import Config, PiiStage

    stage = PiiStage(Config(**cfg), StageContext(work_dir=tmp_path, cache_dir=tmp_path, seed=1, tools_dir=tmp_path))
    table = pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": list(texts),
                      "chars": pa.array([len(t) for t in texts], pa.int64())})
    out = stage.process(table)
    assert out["keep"].to_pylist() == [True] * len(texts)
    assert out["chars"].to_pylist() == [len(t) for t in out["text"].to_pylist()]
    return out.select(["text", "pii_count", "pii_types", "pii_edits"]).to_pylist()


def test_full_width_digits_are_personal_data_too(tmp_path):
    # a notice typed with a full-width IME: the ID (valid checksum, X check
    # character), a landline with full-width parentheses and a mobile
    text = "身份证号：１１０１０５１９４９１２３１００２Ｘ，电话（０１０）６５５２ １２３４或１３８００１３８０００。"
    [row] = _pii(tmp_path, text)
    assert row["text"] == "身份证号：<CN_ID>，电话<PHONE>或<PHONE>。"
    assert [(e["type"], e["start"], e["end"]) for e in row["pii_edits"]] == [
        ("cn_resident_id", 5, 23), ("phone", 26, 40), ("phone", 41, 52)]
    assert (text[5:23], text[26:40], text[41:52]) == ("１１０１０５１９４９１２３１００２Ｘ", "（０１０）６５５２ １２３４", "１３８００１３８０００")
    # hash mode: the full-width ID gets the token of the same ID in ASCII
    [a, b] = _pii(tmp_path, "身份证号：１１０１０５１９４９１２３１００２Ｘ", "身份证号：11010519491231002X",
                  replacement="hash")
    assert a["text"] == b["text"] and a["text"].startswith("身份证号：<CN_ID:")
    # an invalid checksum in full width stays, as in ASCII; a full-width date too
    [row] = _pii(tmp_path, "号码１１０１０５１９４９１２３１００２１，日期２０２３年１０月１日")
    assert row["pii_count"] == 0 and row["text"] == "号码１１０１０５１９４９１２３１００２１，日期２０２３年１０月１日"
