"""The pii stage (stages/pii): each detector on real values, the false-positive
guards, the CPython sample, hash mode, the tally, the config, and one small
real build whose documents/ carry the edited text and every edit."""

from __future__ import annotations

import io
import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pydantic
import pytest
import yaml
import zstandard

from pipeline import layout
from pipeline.config import REPO_ROOT
from stages.base import StageContext
from stages.pii import Config, PiiStage, bank_card, ip, phone, resident_id
from stages.pii.redact import resolve
from stages.pii.found import Found


def _stage(tmp_path, seed: int = 1, **cfg) -> PiiStage:
    return PiiStage(Config(**cfg), StageContext(work_dir=tmp_path, cache_dir=tmp_path, seed=seed, tools_dir=tmp_path))


def _run(stage: PiiStage, *texts: str, hint: str | None = None) -> list[dict]:
    table = pa.table({"id": [f"d{i}" for i in range(len(texts))], "text": list(texts),
                      "chars": pa.array([len(t) for t in texts], pa.int64()),
                      "lang_hint": pa.array([hint] * len(texts), pa.string())})
    out = stage.process(table)
    assert out["keep"].to_pylist() == [True] * len(texts) and out["reason"].null_count == len(texts)
    assert out["chars"].to_pylist() == [len(t) for t in out["text"].to_pylist()]
    return out.select(["text", "pii_count", "pii_types", "pii_edits"]).to_pylist()


def _edits(*spans: tuple[str, int, int, str]) -> list[dict]:
    return [{"type": t, "start": s, "end": e, "replacement": r} for t, s, e, r in spans]


def test_resident_id_checksum_date_and_old_form(tmp_path):
    # 11010519491231002X: the example number of GB 11643-1999 (check character X)
    text = ("身份证号码：11010519491231002X，旧号 身份证 110105491231002；"
            "校验位错误的 110105194912310021，编号 110105491231002。")
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == ("身份证号码：<CN_ID>，旧号 身份证 <CN_ID>；"
                           "校验位错误的 110105194912310021，编号 110105491231002。")
    assert row["pii_edits"] == _edits(("cn_resident_id", 6, 24, "<CN_ID>"), ("cn_resident_id", 32, 47, "<CN_ID>"))
    assert row["pii_count"] == 2 and row["pii_types"] == "cn_resident_id:2"
    assert resident_id.check_character("11010519491231002") == "X"
    assert resident_id.valid18("11010519491231002x")            # lower-case x
    assert not resident_id.valid18("110105194902301234")          # 30 February
    assert not resident_id.valid18("99010519491231002X")          # no province 99
    assert not resident_id.valid15("110105491331002")             # month 13


def test_phone_forms(tmp_path):
    text = "手机 138 0013 8000，国际 +86-138-0013-8000，座机 (010) 6552 1234。"
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == "手机 <PHONE>，国际 <PHONE>，座机 <PHONE>。"
    assert row["pii_edits"] == _edits(("phone", 3, 16, "<PHONE>"), ("phone", 20, 37, "<PHONE>"),
                                      ("phone", 41, 56, "<PHONE>"))
    assert [f.value for f in phone.find(text)] == ["+8613800138000", "+8613800138000", "+861065521234"]
    # E.164 of another country; a mobile inside a longer run of groups; a number
    # without its area code, a bare 8-digit date and an octal constant are not phones
    assert [f.value for f in phone.find("Tel: +44 20 7946 0958, +1 650-253-0000")] == ["+442079460958",
                                                                                     "+16502530000"]
    assert [f.value for f in phone.find("编号 2023 138 0013 8000")] == ["+8613800138000"]
    assert phone.find("拨 6552 1234 或 20231001，037777777777") == []
    # 0086: the international prefix dialled from mainland China, i.e. +86 (CN numbers only)
    zero = "国际 0086-138-0013-8000 或 0086 138 0013 8000 或 008613800138000，北京 0086 10 6552 1234"
    assert [(zero[f.start:f.end], f.value) for f in phone.find(zero)] == [
        ("0086-138-0013-8000", "+8613800138000"), ("0086 138 0013 8000", "+8613800138000"),
        ("008613800138000", "+8613800138000"), ("0086 10 6552 1234", "+861065521234")]
    # no + or 00: a 13-digit run; dots: a version's separator; 0044: not read (CN only)
    assert phone.find("8613800138000 138.0013.8000 0044 20 7946 0958 0086 1234 5678 9012") == []


def test_bank_cards_luhn_and_issuer(tmp_path):
    text = ("Visa 4111 1111 1111 1111, UnionPay 6212-3456-7890-1232, 6222020000000007; "
            "not 4111 1111 1111 1112 or 6212 3456 7890 1233.")
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == ("Visa <BANK_CARD>, UnionPay <BANK_CARD>, <BANK_CARD>; "
                           "not 4111 1111 1111 1112 or 6212 3456 7890 1233.")
    assert row["pii_edits"] == _edits(("bank_card", 5, 24, "<BANK_CARD>"), ("bank_card", 35, 54, "<BANK_CARD>"),
                                      ("bank_card", 56, 72, "<BANK_CARD>"))
    assert bank_card.luhn("79927398713")                      # the Luhn example of ISO/IEC 7812-1
    assert not bank_card.valid("9999999999999995")            # Luhn-valid, no issuer
    assert bank_card.valid("378282246310005")                 # Amex, 4-6-5 digits
    assert not bank_card.valid("3782 822463 10005 1")         # a group of one digit in the middle


def test_ip_public_replaced_private_and_documentation_kept(tmp_path):
    text = ("ping 8.26.56.26 from 192.168.1.10 via 203.0.113.7; v6 2400:cb00:2048:1::6ca2:c665, "
            "2001:db8::1, ::1, fe80::1.")
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == ("ping <IP_ADDRESS> from 192.168.1.10 via 203.0.113.7; v6 <IP_ADDRESS>, "
                           "2001:db8::1, ::1, fe80::1.")
    assert row["pii_edits"] == _edits(("ip", 5, 15, "<IP_ADDRESS>"), ("ip", 54, 81, "<IP_ADDRESS>"))
    assert [f.value for f in ip.find("10.1.2.3 172.16.0.9 127.0.0.1 169.254.3.4 100.64.1.1 "
                                     "198.51.100.23 123.45.67.89")] == ["123.45.67.89"]


def test_four_part_versions_are_not_addresses_but_addresses_in_prose_and_logs_are(tmp_path):
    """Issue 17's versions (context guards: a version word before, a package
    name or operator glued before, a version suffix glued after) stay; the
    same public addresses in prose and logs are still replaced."""
    versions = ("kernel 5.15.0.105, Linux 5.15.0.105-generic, SDK 2.14.3.118, nginx/1.25.3.1, "
                "foo==2.14.3.118, Oracle 19.3.0.1, 固件 2.4.10.17, 内核版本号：5.15.0.105, "
                "openssl-1.1.1.4, 2.14.3.118+dfsg, [1:2.10.2.3] (unstable, testing, now), "
                "<span>5.10.3.3. </span>")
    [row] = _run(_stage(tmp_path), versions)
    assert row["pii_count"] == 0 and row["text"] == versions
    prose = ("connect to 58.33.12.7 from 203.0.113.5 port 22; 服务器地址是 61.135.169.125；IP: 58.33.12.7 "
             "[61.135.169.125] http://61.135.169.125/ dig @128.9.0.32 ~scholzo@217.89.81.34 "
             "Remote=192.169.224.239 echo 193.8.232.2:193.8.232.7 connect to 8.8.8.8 [1.2.3.4] http://1.2.3.4/")
    assert [prose[f.start:f.end] for f in ip.find(prose)] == [
        "58.33.12.7", "61.135.169.125", "58.33.12.7", "61.135.169.125", "61.135.169.125", "128.9.0.32",
        "217.89.81.34", "192.169.224.239", "193.8.232.2", "193.8.232.7"]
    # 203.0.113.5: documentation range; 8.8.8.8, 1.2.3.4: single-digit quads (examples, resolvers)
    assert ip.find("version 5.15.0.105 devkernel 58.33.12.7 envoy 58.33.12.7") == [
        Found(29, 39, "58.33.12.7"), Found(46, 56, "58.33.12.7")]

def test_email_and_overlap_priority(tmp_path):
    # a phone number as the local part is one e-mail address (email before phone);
    # the RFC 2606 example domain is kept
    text = "Mail 13800138000@163.com or Zhang.San@Example.COM or li.si@qq.com."
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == "Mail <EMAIL> or Zhang.San@Example.COM or <EMAIL>."
    assert row["pii_edits"] == _edits(("email", 5, 24, "<EMAIL>"), ("email", 53, 65, "<EMAIL>"))
    # systemd instance units and files with an "@" are not addresses (seen in man pages)
    [row] = _run(_stage(tmp_path), "systemctl start getty@tty1.service user@1000.service; journald@NS.conf")
    assert row["pii_count"] == 0
    # a Gansu ID (62...) that also passes Luhn with UnionPay's prefix is an ID
    [row] = _run(_stage(tmp_path), "ID 620102199003070069 ok")
    assert bank_card.valid("620102199003070069")
    assert row["text"] == "ID <CN_ID> ok" and row["pii_types"] == "cn_resident_id:1"
    assert resolve({"phone": [Found(0, 11, "a")], "bank_card": [Found(5, 21, "b")], "ip": [Found(30, 40, "c")]}) \
        == [("bank_card", Found(5, 21, "b")), ("ip", Found(30, 40, "c"))]


AWS = "AKIAZ7Q3XKLM4NPR2T5V"
GITHUB = "ghp_" + "x7Kq2Lm9Pz4Rt8Vw1Ny6Bc3Hd5Jf0Gs2Ae7Q"    # 36 after the prefix
SLACK = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
GOOGLE = "AIza" + "SyD4x9Lq2Wm7Pz3Rt8Vn1Kc6Hb5Jf0Gs2Ae"    # 35 after the prefix
OPENAI = "sk-proj-" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1BcD4fGh7jKl0nOp3rSt6vWx9z"
STRIPE = "sk_live_" + "51HqLyjWDarjtT1zdp7dcAbC"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n"
       "KUpRKfFLfRYC9AIKjbJTWit+CqvjWYzvQwECAwEAAQ==\n-----END RSA PRIVATE KEY-----")


def test_secrets(tmp_path):
    text = (f"aws {AWS} example AKIAIOSFODNN7EXAMPLE\ngh {GITHUB}\nslack {SLACK}\ngoogle {GOOGLE}\n"
            f"openai {OPENAI}\nstripe {STRIPE}\n{PEM}\nend")
    [row] = _run(_stage(tmp_path), text)
    assert row["text"] == ("aws <SECRET> example AKIAIOSFODNN7EXAMPLE\ngh <SECRET>\nslack <SECRET>\n"
                           "google <SECRET>\nopenai <SECRET>\nstripe <SECRET>\n<SECRET>\nend")
    assert row["pii_types"] == "secret:7"
    starts = [text.index(s) for s in (AWS, GITHUB, SLACK, GOOGLE, OPENAI, STRIPE, PEM)]
    ends = [s + len(v) for s, v in zip(starts, (AWS, GITHUB, SLACK, GOOGLE, OPENAI, STRIPE, PEM))]
    assert row["pii_edits"] == _edits(*(("secret", s, e, "<SECRET>") for s, e in zip(starts, ends)))
    # a key block cut before its END line: up to the end of its base64 lines
    [row] = _run(_stage(tmp_path), PEM.rsplit("\n", 1)[0] + "\nThe key above was revoked.")
    assert row["text"] == "<SECRET>\nThe key above was revoked."


NOT_PII = """Python 3.11.7 was released on 2023-10-01 (20231001), version 21.2.3.4 and v 22.1.0.3 follow.
Build at 2023-10-01 12:30:45 UTC, epoch 1696118400, ms 1696118400000.
ISBN 978-7-111-54742-6, ISBN-10 7-111-54742-5; UUID 550e8400-e29b-41d4-a716-446655440000.
commit 9fceb02d0ae598e95dc970b74767f19372d61af8, max 18446744073709551615, mask 0xDEADBEEF.
12.6.2.1. Compile and install; OID 1.3.6.1.4.1.2021; time 12:30:45; a[1::2]; std::vector; dead::beef.
价格 13800 元，订单号 20231001000123，邮编 100080，tel 6552 1234。"""


def test_no_false_positives(tmp_path):
    [row] = _run(_stage(tmp_path), NOT_PII)
    assert row == {"text": NOT_PII, "pii_count": 0, "pii_types": None, "pii_edits": []}


def _cpython() -> list[dict]:
    with open(REPO_ROOT / "data" / "sample" / "code-cpython.jsonl.zst", "rb") as fh:
        return [json.loads(line) for line in
                io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(fh), encoding="utf-8")]


def test_cpython_files_lose_only_their_email_addresses(tmp_path):
    """The 50 CPython standard-library files of the sample (546,012 characters
    of numbers, hex, versions and dates): the only edits are the authors'
    e-mail addresses (and one Message-ID, which has an address's shape);
    with the number detectors on for code too, still nothing else."""
    recs = _cpython()
    rows = _run(_stage(tmp_path), *(r["text"] for r in recs), hint="code")
    found = [(i, recs[i]["text"][e["start"]:e["end"]]) for i, row in enumerate(rows) for e in row["pii_edits"]]
    assert found == [(14, "brian@sweetapp.com"), (18, "email-sig@python.org"), (19, "email-sig@python.org"),
                     (19, "142480216486.20800.16526388040877946887@nightshade.la.mastaler.com"),
                     (32, "david_ascher@brown.edu"), (32, "piers@cs.su.oz.au"), (32, "urtubia@mrbook.org"),
                     (33, "fdrake@acm.org"), (43, "gward@python.net")]
    assert {e["type"] for row in rows for e in row["pii_edits"]} == {"email"}
    numbers_too = _run(_stage(tmp_path, skip_number_languages=()), *(r["text"] for r in recs), hint="code")
    assert numbers_too == rows


def test_code_keeps_numbers_but_not_addresses(tmp_path):
    code = 'ADMIN = "ops@corp.cn"\nPHONE = "13800138000"\nHOST = "8.26.56.26"\n'
    [row] = _run(_stage(tmp_path), code, hint="code")
    assert row["text"] == 'ADMIN = "<EMAIL>"\nPHONE = "13800138000"\nHOST = "8.26.56.26"\n'
    [prose] = _run(_stage(tmp_path), code)
    assert prose["pii_types"] == "email:1,ip:1,phone:1"


def test_hash_mode_is_consistent_and_keyed(tmp_path):
    text = "a 138 0013 8000 b +86-138-0013-8000 c li.si@qq.com d LI.SI@QQ.COM"
    [row] = _run(_stage(tmp_path, replacement="hash", hash_key="k1"), text)
    tokens = [e["replacement"] for e in row["pii_edits"]]
    assert tokens[0] == tokens[1] and tokens[2] == tokens[3] and tokens[0] != tokens[2]
    assert tokens[0].startswith("<PHONE:") and tokens[2].startswith("<EMAIL:") and len(tokens[0]) == len("<PHONE:>") + 8
    [other] = _run(_stage(tmp_path, replacement="hash", hash_key="k2"), text)
    assert [e["replacement"] for e in other["pii_edits"]] != tokens
    [seeded] = _run(_stage(tmp_path, seed=1, replacement="hash"), text)
    [seeded_again] = _run(_stage(tmp_path, seed=1, replacement="hash"), text)
    [seed2] = _run(_stage(tmp_path, seed=2, replacement="hash"), text)
    assert seeded == seeded_again and seeded != seed2


def test_types_and_tally(tmp_path):
    texts = ["mail li.si@qq.com, 138 0013 8000", "nothing here", "ip 8.26.56.26 and 9.26.56.26"]
    stage = _stage(tmp_path, types=["ip", "email"])
    rows = _run(stage, *texts)
    assert [r["pii_types"] for r in rows] == ["email:1", None, "ip:2"]
    assert rows[0]["text"] == "mail <EMAIL>, 138 0013 8000"
    table = stage.process(pa.table({"id": ["a", "b", "c"], "text": texts, "chars": [len(t) for t in texts],
                                    "lang_hint": pa.nulls(3, pa.string())}))
    assert PiiStage.tally(table) == {"email": 1, "ip": 2, "documents_edited": 2}
    assert set(PiiStage.tally_columns) <= set(PiiStage.columns)
    assert PiiStage.effective_settings(Config(types=["ip", "email"])) == {
        "priority": ["email", "ip"], "placeholders": ["<EMAIL>", "<IP_ADDRESS>"]}


def test_config_errors():
    with pytest.raises(pydantic.ValidationError, match="unknown region"):
        Config(phone_regions=["XX"])
    with pytest.raises(pydantic.ValidationError):
        Config(types=["names"])
    with pytest.raises(pydantic.ValidationError, match="extra"):
        Config(replacements="hash")
    assert Config(types=["ip", "secret", "ip"]).types == ("secret", "ip")
    assert Config(phone_regions=["hk", "CN"]).phone_regions == ("HK", "CN")


def test_a_build_edits_text_and_documents_carry_the_edits(tmp_path):
    from pipeline.build import build
    from pipeline.lineage import lineage_for_document

    prose = ["The quick brown fox jumps over the lazy dog while the farmer watches from the old wooden fence.",
             "A small boat drifted down the quiet river as the evening light faded behind the distant hills."]
    pii = ["Write to li.si@qq.com or call 138 0013 8000 when the harvest is in and the barn is full again.",
           "The server at 8.26.56.26 answered, but the one at 192.168.1.10 stayed silent for the whole night."]
    web = tmp_path / "web.jsonl"
    web.write_text("".join(json.dumps({"text": t}) + "\n" for t in [*prose * 20, *pii]), encoding="utf-8")
    data = {"seed": 5, "sources": {"web": {"paths": [str(web)]}}, "executor": {"num_workers": 2},
            "heuristics": {"enabled": False}, "perplexity": {"enabled": False}, "dedup": {"enabled": False},
            "langid": {"allowed_languages": ["en"]}, "tokenize": {"vocab_size": 300}, "output": {"seq_length": 16}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    result = build("v1", tmp_path / "c.yaml", tmp_path / "corpora", log=lambda m: None)
    m = result.manifest
    assert m["stage_order"] == ["langid", "pii", "tokenize", "mixture"]
    assert m["stages"]["pii"]["totals"]["kept"] == 42
    docs = pq.read_table(result.version_dir / layout.DOCUMENTS).to_pylist()
    by_text = {d["id"].rsplit(":", 1)[1]: d for d in docs}
    first, second = by_text["41"], by_text["42"]
    assert first["text"] == "Write to <EMAIL> or call <PHONE> when the harvest is in and the barn is full again."
    assert first["pii_edits"] == _edits(("email", 9, 21, "<EMAIL>"), ("phone", 30, 43, "<PHONE>"))
    assert second["text"] == ("The server at <IP_ADDRESS> answered, but the one at 192.168.1.10 stayed "
                              "silent for the whole night.")
    assert second["pii_types"] == "ip:1" and first["pii_count"] == 2
    assert sum(d["pii_count"] for d in docs) == 3
    found = lineage_for_document(result.version_dir, first["id"], global_batch=2)
    assert found["document"]["pii_count"] == 2 and found["document"]["pii_types"] == "email:1,phone:1"
    # The manifest's counts are the edits the version records, type by type (pii drops
    # nothing, so every edit is in documents/ of a kept document).
    edits = Counter(e["type"] for d in docs for e in d["pii_edits"])
    tally = m["stages"]["pii"]["totals"]["tally"]
    assert tally == {"email": 1, "phone": 1, "ip": 1, "documents_edited": 2}
    assert {k: v for k, v in tally.items() if k != "documents_edited"} == dict(edits)
    assert tally["documents_edited"] == sum(1 for d in docs if d["pii_edits"])
    assert m["stages"]["pii"]["per_source"]["web"]["tally"] == tally
    # inspect --stage pii --kept --where pii_edits: the edited documents, and only them
    from pipeline.examples import sample_examples

    shown = sample_examples(result.version_dir, "pii", n=10, kept=True, where="pii_edits")
    assert sorted(r["id"] for r in shown) == sorted([first["id"], second["id"]])
    assert len(sample_examples(result.version_dir, "pii", n=50, kept=True, where="pii_count")) == 2
    with pytest.raises(ValueError, match="--where pii_nothing: no such column"):
        sample_examples(result.version_dir, "pii", kept=True, where="pii_nothing")


def test_hash_mode_without_a_key_warns_in_the_manifest(tmp_path):
    """The seed is published, so a seed-keyed hash is guessable: the build says so
    (stages.pii.warnings) in hash mode without hash_key, and not with one."""
    from pipeline.build import build

    texts = ["Write to li.si@qq.com or call 138 0013 8000 when the harvest is in and the barn is full."] + [
        f"A small boat number {i} drifted down the quiet river as the evening light faded." for i in range(20)]
    web = tmp_path / "web.jsonl"
    web.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    warnings = {}
    for name, pii in (("seeded", {"replacement": "hash"}), ("keyed", {"replacement": "hash", "hash_key": "k-9f2"})):
        data = {"seed": 5, "sources": {"web": {"paths": [str(web)]}}, "executor": {"num_workers": 1},
                "heuristics": {"enabled": False}, "perplexity": {"enabled": False}, "dedup": {"enabled": False},
                "langid": {"allowed_languages": ["en"]}, "pii": pii, "tokenize": {"vocab_size": 300},
                "output": {"seq_length": 16}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
        result = build(name, tmp_path / f"{name}.yaml", tmp_path / "corpora", log=lambda m: None)
        stage = result.manifest["stages"]["pii"]
        assert stage["totals"]["tally"] == {"email": 1, "phone": 1, "documents_edited": 1}
        warnings[name] = stage["warnings"]
    [line] = warnings["seeded"]
    assert line.startswith("replacement: hash without hash_key: the hash tokens are keyed by the build seed")
    assert "set pii.hash_key to a private string" in line
    assert warnings["keyed"] == []

def test_the_sample_forum_posts_answer_key(tmp_path):
    """data/sample/forum-posts.jsonl lists in each post's ``meta.pii`` the
    personal data it carries and whether the default stage must replace or
    keep it (a checksum-invalid resident ID, a private IP and documentation
    e-mail domains are kept). The stage's edits are exactly the replaced
    values, type by type."""
    posts = [json.loads(line) for line in (REPO_ROOT / "data" / "sample" / "forum-posts.jsonl")
             .read_text(encoding="utf-8").splitlines()]
    texts = [p["text"] for p in posts]
    out = _run(_stage(tmp_path), *texts)
    expected, found = [], []
    for post, text, row in zip(posts, texts, out):
        expected += sorted((p["type"], p["value"]) for p in post["meta"]["pii"] if p["expect"] == "replaced")
        found += sorted((e["type"], text[e["start"]:e["end"]]) for e in row["pii_edits"])
        for p in post["meta"]["pii"]:
            if p["expect"] == "kept":
                assert p["value"] in row["text"], p
        for look in post["meta"]["lookalikes"]:
            assert look["value"] in row["text"], look
    assert found == expected
    assert Counter(t for t, _ in found) == {"phone": 5, "cn_resident_id": 2, "bank_card": 2, "ip": 2, "email": 1}
