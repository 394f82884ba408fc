"""PII stage benchmark: speed against the heuristics stage, counts per type per source.

Reads ``../shared/corpus`` (skips when absent; all five files, 100k
documents, 44.8 M characters) as one document table (``bench.quality.load_corpus``),
and runs in this one process, in partitions of 2,000 documents as a build
worker does:

* the ``pii`` stage with its default config, and the ``heuristics`` stage
  (default config, each document's ``langid_lang`` set to the corpus's own
  language label, ``code`` for dev-code, so both see the same documents
  without running language ID), alternating run by run; each stage's time is
  the least CPU time (``time.process_time``) of ``--repeats`` runs (the
  machine is shared: the least is the least disturbed run);
* each detector family alone on the same text (where the stage's time goes);
* ``phonenumbers.PhoneNumberMatcher`` (the library's own scanner, region CN,
  ``Leniency.VALID``) against :func:`stages.pii.phone.find` on the fortunes
  and Debian Reference documents (prose with numbers, 8 M characters);
* the stage's tally per source (replacements per type, documents edited);
* recall on a planted set (:func:`planted`): 100 values of each type in the
  forms people write them (seeded, valid by construction: MOD 11-2, Luhn,
  real number ranges, public addresses, token formats), each inserted in a
  zh or en sentence at a line break of a held-out document (odd lines of
  fortunes and man pages); found = an edit of that type over exactly the
  planted span; extra = edits in the host documents beyond those they had.

Writes ``bench-results/pii.json`` and ``bench-results/pii.md``; ``run(out_dir)``
returns the Markdown.

    .venv/bin/python -m bench.pii [--out bench-results] [--limit N] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pyarrow as pa

from bench.quality import CORPUS, PARTITION_DOCS, load_corpus
from pipeline.config import REPO_ROOT
from stages.base import StageContext


def _cpu(fn, items) -> float:
    t0 = time.process_time()
    for item in items:
        fn(item)
    return time.process_time() - t0


def run(out_dir: Path, corpus: Path = CORPUS, limit: int | None = None, repeats: int = 2) -> str:
    """Benchmark the pii stage; return a Markdown section, write pii.json/pii.md."""
    from stages import heuristics
    from stages.pii import PiiStage, bank_card, email, ip, phone, resident_id, secrets
    from stages.pii import Config as PiiConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (corpus / "dev-fortunes.jsonl.zst").exists():
        return f"## PII stage\n\nskipped: {corpus} not found\n"
    table = load_corpus(corpus, limit)
    labels = [("code" if hint == "code" else label) for hint, label in
              zip(table["lang_hint"].to_pylist(), table["label"].to_pylist())]
    table = table.append_column("langid_lang", pa.array(labels, pa.string()))
    parts = [table.slice(s, PARTITION_DOCS) for s in range(0, table.num_rows, PARTITION_DOCS)]
    ctx = StageContext(work_dir=out_dir, cache_dir=out_dir, seed=1234, tools_dir=REPO_ROOT / "tools" / "bin")
    default = __import__("yaml").safe_load((REPO_ROOT / "configs" / "default.yaml").read_text())
    pii = PiiStage(PiiConfig(), ctx)
    heur = heuristics.HeuristicsStage(heuristics.Config(**default.get("heuristics", {})), ctx)
    chars = sum(table["chars"].to_pylist())
    best = {"pii": float("inf"), "heuristics": float("inf")}
    outputs = []
    for _ in range(repeats):
        for name, stage in (("pii", pii), ("heuristics", heur)):
            outs = []
            t0 = time.process_time()
            for part in parts:
                outs.append(stage.process(part))
            best[name] = min(best[name], time.process_time() - t0)
            if name == "pii":
                outputs = outs
    result: dict = {"corpus": str(corpus), "documents": table.num_rows, "chars": chars, "cpus": os.cpu_count(),
                    "repeats": repeats, "load_average_at_start": os.getloadavg()[0], "stages": {}}
    for name, cpu in best.items():
        result["stages"][name] = {"cpu_s": round(cpu, 2), "documents_per_s": round(table.num_rows / cpu, 1),
                                  "mchars_per_s": round(chars / cpu / 1e6, 3)}
    result["pii_over_heuristics_cpu"] = round(best["pii"] / best["heuristics"], 3)

    # Each detector alone (numbers: on the documents the stage searches for them).
    texts = table["text"].to_pylist()
    prose = [t for t, h in zip(texts, table["lang_hint"].to_pylist()) if h != "code"]
    families = {"secret": (secrets.find, texts), "email": (email.find, texts),
                "cn_resident_id": (resident_id.find, prose), "bank_card": (bank_card.find, prose),
                "phone": (lambda t: phone.find(t, ("CN",)), prose), "ip": (ip.find, prose)}
    result["detectors_cpu_s"] = {k: round(_cpu(fn, items), 2) for k, (fn, items) in families.items()}

    # phonenumbers' own scanner vs the regex pre-filter, on prose with numbers.
    import phonenumbers

    sample = [t for t, f in zip(texts, table["file"].to_pylist()) if f in ("dev-fortunes", "dev-debref")]
    phone.accept.cache_clear()
    ours = _cpu(lambda t: phone.find(t, ("CN",)), sample)
    matcher = _cpu(lambda t: list(phonenumbers.PhoneNumberMatcher(t, "CN", leniency=phonenumbers.Leniency.VALID)),
                   sample)
    result["phone_scanner"] = {"documents": len(sample), "chars": sum(map(len, sample)),
                               "regex_prefilter_cpu_s": round(ours, 2), "phonenumbers_matcher_cpu_s": round(matcher, 2),
                               "matcher_over_prefilter": round(matcher / max(ours, 1e-9), 1)}

    # Counts per type per source (the stage's tally).
    tally: dict[str, dict[str, int]] = {}
    out = pa.concat_tables(outputs)
    for source in sorted(set(out["source"].to_pylist())):
        rows = out.filter(pa.compute.equal(out["source"], source))
        tally[source] = {"documents": rows.num_rows, **type(pii).tally(rows)}
    result["tally"] = tally
    result["planted"] = planted(pii, table)
    (out_dir / "pii.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (out_dir / "pii.md").write_text(md)
    return md


def _luhn_complete(body: str) -> str:
    from stages.pii.bank_card import luhn

    return next(body + d for d in "0123456789" if luhn(body + d))


def planted_values(seed: int = 17, per_type: int = 100) -> list[tuple[str, str]]:
    """``[(type, written value)]``: ``per_type`` values of each type, valid by
    construction, in several written forms."""
    import ipaddress
    import random

    from stages.pii.resident_id import check_character

    rng = random.Random(seed)
    digits = lambda n: "".join(rng.choice("0123456789") for _ in range(n))  # noqa: E731
    out: list[tuple[str, str]] = []
    for i in range(per_type):
        user = rng.choice(["zhang.wei", "li_na", "wang.fang88", "liu-yang", "chen.jing", "j.smith", "mary.k"])
        out.append(("email", f"{user}{i}@{rng.choice(['qq.com', '163.com', 'gmail.com', 'sina.com.cn', 'corp.cn'])}"))
        mobile = rng.choice(["138", "139", "150", "158", "186", "188", "135", "177", "199"]) + digits(8)
        area, local = rng.choice([("010", 8), ("021", 8), ("0755", 8), ("0571", 8), ("020", 8), ("0931", 7)])
        subscriber = rng.choice("2345678") + digits(local - 1)
        a, b, c = mobile[:3], mobile[3:7], mobile[7:]
        out.append(("phone", [mobile, f"{a} {b} {c}", f"{a}-{b}-{c}", f"+86 {a} {b} {c}", f"+86-{a}-{b}-{c}",
                              f"({area}) {subscriber[:4]} {subscriber[4:]}", f"{area}-{subscriber}",
                              f"+86 {area[1:]} {subscriber}"][i % 8]))
        year = rng.randint(1950, 2005)
        body = (rng.choice(["110101", "310104", "440305", "510107", "620102", "330106"])
                + f"{year:04d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}" + digits(3))
        out.append(("cn_resident_id", body + check_character(body)))
        card = _luhn_complete(rng.choice(["622202", "621700", "4", "51", "55", "2221", "3528", "6011"])
                              .ljust(15, "0")[:6] + digits(9))
        if i % 5 == 4:
            card = _luhn_complete("37" + digits(12))                     # Amex, 15 digits
            out.append(("bank_card", f"{card[:4]} {card[4:10]} {card[10:]}"))
        else:
            out.append(("bank_card", card if i % 2 else " ".join(card[k:k + 4] for k in range(0, 16, 4))))
        while True:
            if i % 4 == 3:
                address = ipaddress.IPv6Address(f"24{digits(2)}:{rng.randrange(1 << 16):x}::{rng.randrange(1 << 16):x}")
            else:
                address = ipaddress.IPv4Address(f"{rng.randint(11, 223)}.{rng.randint(0, 255)}."
                                                f"{rng.randint(0, 255)}.{rng.randint(1, 254)}")
            if address.is_global and not address.is_multicast:
                break
        out.append(("ip", str(address)))
        alnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        out.append(("secret", [
            "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16)),
            "ghp_" + "".join(rng.choice(alnum) for _ in range(36)),
            "AIza" + "".join(rng.choice(alnum + "_-") for _ in range(35)),
            "xoxb-" + digits(11) + "-" + digits(12) + "-" + "".join(rng.choice(alnum) for _ in range(24)),
            "sk_live_" + "".join(rng.choice(alnum) for _ in range(24))][i % 5]))
    return out


SENTENCES = ("联系方式：{}，请勿外传。", "如有问题请联系 {} 谢谢。", "Please contact {} for details.",
             "The value {} was found in the log.")


def planted(stage, table: pa.Table, seed: int = 17) -> dict:
    """Recall per type on :func:`planted_values` inserted into held-out documents."""
    import random

    rng = random.Random(seed)
    hosts = [i for i, (f, line) in enumerate(zip(table["file"].to_pylist(), table["line"].to_pylist()))
             if f in ("dev-fortunes", "dev-manpages") and line % 2 == 1]
    values = planted_values(seed)
    chosen = rng.sample(hosts, len(values))
    texts = table["text"].to_pylist()
    planted_texts, spans = [], []
    for (kind, value), host in zip(values, chosen):
        text = texts[host]
        breaks = [k for k, ch in enumerate(text) if ch == "\n"] or [len(text)]
        at = rng.choice(breaks)
        sentence = rng.choice(SENTENCES)
        before = text[:at] + "\n" + sentence[:sentence.index("{}")]
        planted_texts.append(before + value + sentence[sentence.index("{}") + 2:] + text[at:])
        spans.append((kind, len(before), len(before) + len(value)))
    rows = table.take(chosen)
    base = stage.process(rows)
    rows = rows.set_column(rows.column_names.index("text"), "text", pa.array(planted_texts, pa.string()))
    rows = rows.set_column(rows.column_names.index("chars"), "chars",
                           pa.array([len(t) for t in planted_texts], pa.int64()))
    out = stage.process(rows)
    found: dict[str, int] = {}
    extra = 0
    for (kind, start, end), edits, before in zip(spans, out["pii_edits"].to_pylist(), base["pii_count"].to_pylist()):
        hit = any(e["type"] == kind and e["start"] == start and e["end"] == end for e in edits)
        found[kind] = found.get(kind, 0) + hit
        extra += len(edits) - hit - before
    per_type = {k: sum(1 for kind, _ in values if kind == k) for k in TYPES}
    return {"values": len(values), "per_type": per_type, "found": found, "extra_edits": extra,
            "missed": [v for (kind, v), (_, s, e), edits in zip(values, spans, out["pii_edits"].to_pylist())
                       if not any(x["type"] == kind and x["start"] == s and x["end"] == e for x in edits)][:20]}


TYPES = ("email", "phone", "cn_resident_id", "bank_card", "ip", "secret")


def markdown(r: dict) -> str:
    """The Markdown section of :func:`run`'s results."""
    lines = [f"## PII stage ({r['corpus']}, {r['documents']:,} documents, {r['chars'] / 1e6:.1f} M chars, "
             f"load average {r['load_average_at_start']:.1f} on {r['cpus']} CPUs)", "",
             f"| stage | CPU s (best of {r['repeats']}) | documents/s per core | M chars/s per core |",
             "|---|---:|---:|---:|"]
    for name, s in r["stages"].items():
        lines.append(f"| {name} | {s['cpu_s']} | {s['documents_per_s']:,.0f} | {s['mchars_per_s']} |")
    lines += ["", f"pii / heuristics CPU time: {r['pii_over_heuristics_cpu']}", "",
              "Detector families alone (CPU s; numbers on the non-code documents): "
              + ", ".join(f"{k} {v}" for k, v in r["detectors_cpu_s"].items()), ""]
    ps = r["phone_scanner"]
    lines += [f"Phone scanning on {ps['documents']:,} fortunes + Debian Reference documents "
              f"({ps['chars'] / 1e6:.1f} M chars): regex pre-filter + phonenumbers {ps['regex_prefilter_cpu_s']} s, "
              f"phonenumbers.PhoneNumberMatcher {ps['phonenumbers_matcher_cpu_s']} s "
              f"({ps['matcher_over_prefilter']}x).", "",
              "| source | documents | " + " | ".join(TYPES) + " | documents edited |",
              "|---|---:|" + "---:|" * (len(TYPES) + 1)]
    for source, t in r["tally"].items():
        lines.append(f"| {source} | {t['documents']:,} | " + " | ".join(f"{t.get(k, 0):,}" for k in TYPES)
                     + f" | {t['documents_edited']:,} |")
    p = r.get("planted")
    if p:
        lines += ["", f"Planted set: {p['values']} values in held-out fortunes and man pages; found (exact span, "
                  "right type) per type: "
                  + ", ".join(f"{k} {p['found'].get(k, 0)}/{n}" for k, n in p["per_type"].items())
                  + f"; edits beyond the planted values and the hosts' own: {p['extra_edits']}."]
        if p["missed"]:
            lines.append("Missed: " + ", ".join(f"`{v}`" for v in p["missed"]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "bench-results")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--limit", type=int, default=None, help="every k-th document, at most N")
    ap.add_argument("--repeats", type=int, default=2, help="runs per stage; the least CPU time is kept")
    args = ap.parse_args()
    print(run(args.out, args.corpus, args.limit, args.repeats))
