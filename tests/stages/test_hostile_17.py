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
    nested = "-----BEGIN EC PRIVATE KEY-----" + PEM + "-----END EC PRIVATE KEY-----"
    assert [(f.start, f.end) for f in secrets.find(nested)] == [(0, len(nested))]


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


def _preflight(path, **es):
    from stages.decontaminate import Config, DecontaminateStage

    return DecontaminateStage.preflight(Config(eval_sets={"ev": {"path": str(path), "fields": ["q"], **es}}))


def test_eval_jsonl_with_bom_crlf_bad_bytes_non_objects_and_lone_surrogates(tmp_path):
    from stages.decontaminate.config import EvalSet
    from stages.decontaminate.evalsets import read_items

    # written by a Windows tool: UTF-8 BOM and CRLF line ends; read as usual
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b'\xef\xbb\xbf{"id": "HumanEval/0", "q": "one two"}\r\n{"id": "HumanEval/1", "q": "three"}\r\n')
    assert [(i.id, i.fields) for i in read_items(EvalSet(path=str(bom), fields=("q",), id_field="id"))] == [
        ("HumanEval/0", ("one two",)), ("HumanEval/1", ("three",))]
    # a lone surrogate escape (no UTF-8 string can hold it) becomes U+FFFD, a separator
    lone = tmp_path / "lone.jsonl"
    lone.write_text('{"q": "caf\\ud800 au lait"}\n', encoding="utf-8")
    assert read_items(EvalSet(path=str(lone), fields=("q",)))[0].fields == ("caf\ufffd au lait",)
    # each of these was a traceback out of preflight; now one line naming file and line
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"q": "ok"}\n{"q": "caf\xe9"}\n')
    arr = tmp_path / "array.jsonl"
    arr.write_text('[{"q": "x"}]\n', encoding="utf-8")
    null = tmp_path / "null.jsonl"
    null.write_text('{"q": "x"}\n\nnull\n', encoding="utf-8")
    assert _preflight(bad) == [f"decontaminate.eval_sets.ev: {bad}:2: not UTF-8 (byte 11 of the line)"]
    assert _preflight(arr) == [f"decontaminate.eval_sets.ev: {arr}:1: a JSON array, not an object "
                               "(one record per line)"]
    assert _preflight(null) == [f"decontaminate.eval_sets.ev: {null}:3: a JSON null, not an object "
                                "(one record per line)"]


def _index(items, **cfg):
    from stages.decontaminate import Config
    from stages.decontaminate.index import build_index

    config = Config(eval_sets={"rep": {"path": "unused.jsonl", "fields": ["q"]}}, **cfg)
    return config, build_index(config, items)


def test_a_document_repeating_a_gram_an_item_repeats_is_matched_without_blowing_up():
    # an item holding a run of 60 "哈" and one of 60 "the"; documents made of
    # 300 K "哈" and of 100 K "the" (junk pages are like that). Every document
    # gram was looked up with all 53 postings of the item: occurrences x
    # postings triples (16 M here; 53 M, 14 s and 2.6 GB for 1 M characters;
    # now 0.3 s and ~30 MB: two occurrences per block, each once per item).
    import numpy as np

    from stages.decontaminate.evalsets import Item
    from stages.decontaminate.match import _thin, find_hits
    from stages.decontaminate.normalize import gram_hashes, units

    config, index = _index({"rep": [Item("HumanEval/0", ("哈" * 60,)), Item("HumanEval/1", ("the " * 60,))]})
    doc = "哈" * 300_000
    [hit] = find_hits(doc, index, config)
    assert (hit.item, hit.start, hit.end, hit.coverage, hit.rule) == ("HumanEval/0", 0, 300_000, 1.0, "item_coverage")
    [hit] = find_hits("x " + "the " * 100_000 + "y", index, config)
    assert (hit.item, hit.start, hit.end) == ("HumanEval/1", 2, 2 + 4 * 100_000 - 1)
    # the work: two occurrences kept per key per block of 2n + 1 = 17 units
    j, k = index.lookup(gram_hashes(units(doc)[0], 8))
    assert len(j) == 300_000 - 7
    j2, k2 = _thin(j, k, 8)
    assert len(j2) == 2 * int(np.ceil((300_000 - 7) / 17))
    assert set(k2.tolist()) == set(k.tolist()) and (j2.min(), j2.max()) == (j.min(), j.max())


# rows of a numeric table (cells of 2-4 digits): before, each row read as a
# phone number or a Luhn-valid card of a known issuer
TABLE = ("id  x   y   z\n"
         "16 520 196 465\n"
         "13 353 526 502\n"
         "341 444 602 328 526\n"
         "3728 211 3278 8851\n")


def test_numeric_table_cells_are_not_phones_or_cards_but_written_numbers_are(tmp_path):
    from stages.pii import bank_card, phone

    assert phone.find(TABLE) == [] and bank_card.find(TABLE) == []
    [row] = _pii(tmp_path, TABLE)
    assert row["pii_count"] == 0 and row["text"] == TABLE
    # the groupings people write are still numbers
    text = "手机 138 0013 8000 或 1380 013 8000，座机 0755-8888 6666，卡号 6222 0200 1234 5678 903，Amex 3782 822463 10005"
    assert [f.value for f in phone.find(text)] == ["+8613800138000", "+8613800138000", "+8675588886666"]
    assert [f.value for f in bank_card.find(text)] == ["6222020012345678903", "378282246310005"]


def test_item_ids_with_separators_tally_under_their_set_and_a_set_named_like_a_tally_key_is_refused():
    # HumanEval's real ids hold "/"; the tally key "<set>/<id>" still nests
    # under the set (set names hold no "/"), whatever the id holds
    import pyarrow as pa
    import pydantic
    import pytest

    from pipeline.report import tally_rows
    from stages.decontaminate import Config, DecontaminateStage
    from stages.decontaminate.stage import SPAN_TYPE

    span = {"eval_set": "he", "start": 0, "end": 5, "coverage": 1.0, "rule": "item_coverage"}
    table = pa.table({"decontaminate_spans": pa.array([[{**span, "item": "HumanEval/0"}, {**span, "item": "a,b:c"}],
                                                       [{**span, "item": "x/y/z"}], []], SPAN_TYPE)})
    tally = DecontaminateStage.tally(table)
    assert tally == {"documents_hit": 2, "he": 2, "he/HumanEval/0": 1, "he/a,b:c": 1, "he/x/y/z": 1}
    assert [(k, kind) for k, _, _, kind in tally_rows({"web": tally})] == [
        ("documents_hit", "key"), ("he", "key"), ("he/HumanEval/0", "child"), ("he/a,b:c", "child"),
        ("he/x/y/z", "child")]
    # an eval set named "documents_hit" would add its documents into the
    # documents_hit count: refused in the config, one line naming the key
    with pytest.raises(pydantic.ValidationError, match="decontaminate.eval_sets.documents_hit: a reserved name"):
        Config(eval_sets={"documents_hit": {"path": "x.jsonl", "fields": ["q"]}})


def test_python_slices_in_prose_are_not_ipv6_addresses(tmp_path):
    # a tutorial (prose, so the number detectors run) quoting numpy code:
    # "2048::2" parsed as the IPv6 address 2048::2 in 2000::/3 and was replaced
    from stages.pii import ip

    text = "Take every other sample: `x = arr[2048::2]`, or the tail `y = x[2024::3]`. DNS: 2606:4700:4700::1111."
    assert [f.value for f in ip.find(text)] == ["2606:4700:4700::1111"]
    [row] = _pii(tmp_path, text)
    assert row["text"] == ("Take every other sample: `x = arr[2048::2]`, or the tail `y = x[2024::3]`. "
                           "DNS: <IP_ADDRESS>.")
    assert [f.value for f in ip.find("v6 2400:cb00:2048:1::6ca2:c665 and 2a00:1450:4001:80b::200e")] == [
        "2400:cb00:2048:1::6ca2:c665", "2a00:1450:4001:80b::200e"]


def test_retina_asset_names_and_git_ssh_urls_are_not_mail_addresses(tmp_path):
    from stages.pii import email

    text = ('<img src="logo@2x.png" srcset="icon@3x.webp 3x">; run `git clone git@github.com:org/repo.git`; '
            "write to zhang.san@qq.com or ana@empresa.com.py")
    assert [f.value for f in email.find(text)] == ["zhang.san@qq.com", "ana@empresa.com.py"]
    [row] = _pii(tmp_path, text)
    assert row["text"] == ('<img src="logo@2x.png" srcset="icon@3x.webp 3x">; '
                           "run `git clone git@github.com:org/repo.git`; write to <EMAIL> or <EMAIL>")


def test_phone_windows_of_a_digit_table_try_only_8_to_15_digit_runs(monkeypatch):
    # a row of 2-digit cells: the 24-character candidate "12 34 56 78 90 12 34 56"
    # fails whole; of its 28 sub-windows only the 14 holding 8-15 digits are
    # worth a call to the validator (the others can never be numbers)
    from stages.pii import phone

    calls = []
    real = phone.accept
    monkeypatch.setattr(phone, "accept", lambda piece, regions: calls.append(piece) or real(piece, regions))
    assert phone.find("12 34 56 78 90 12 34 56") == []
    assert len(calls) == 1 + 14 and all(8 <= sum(c.isdigit() for c in piece) <= 15 for piece in calls[1:])
    # a number inside such a row is still found by its window
    assert [f.value for f in phone.find("编号 20 23 138 0013 8000")] == ["+8613800138000"]
