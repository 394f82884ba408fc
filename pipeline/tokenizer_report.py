"""Tokenizer coverage report: several tokenizers side by side on one corpus.

    python -m pipeline tokenizer-report --tokenizer 32k=a/tokenizer.json \\
        --tokenizer 64k=b/tokenizer.json --corpus ../shared/corpus --out reports/tok

writes ``tokenizer_report.md``, ``tokenizer_report.json`` and a self-contained
``tokenizer_report.html`` (plots inlined as SVG). Every build also runs it on
its held-out split (:func:`build_report`). The metrics are defined in
docs/tokenizer_report.md; in short, per language, per source and overall:

* ``chars_per_token``, ``bytes_per_token`` (UTF-8), ``tokens_per_word``
  (fertility, Rust et al. 2021; words from :func:`stages.text.words`, rjieba
  for Chinese);
* ``round_trip``: share of documents with ``decode(encode(x)) == x``;
* ``unknown_rate``: share of tokens that are the unknown token;
* ``byte_fallback_rate``: share of characters that do not come out whole,
  i.e. that two or more tokens share (raw byte pieces of the character);
* coverage of character classes (CJK blocks, full-width forms, emoji) and of
  spans (snake_case / camelCase identifiers, indentation, whitespace runs);
* per tokenizer: vocabulary composition by script, CJK block coverage of the
  vocabulary, the longest tokens, the most fragmented frequent words.
"""

from __future__ import annotations

import gzip
import html
import io
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from common.tokenizer_files import TIKTOKEN_PATTERNS, resolve_pattern, tokenizer_kind
from pipeline.layout import TOKENIZER, TOKENIZER_REPORT_DIR
from pipeline.layout import TOKENIZER_REPORT_STEM as REPORT_STEM
HEADLINE = ("chars_per_token", "bytes_per_token", "tokens_per_word", "round_trip",
            "unknown_rate", "byte_fallback_rate")

# Character classes: (name, [(first, last) code point ranges]).
CHAR_CLASSES = [
    ("cjk_basic", [(0x4E00, 0x9FFF)]),
    ("cjk_ext_a", [(0x3400, 0x4DBF)]),
    ("cjk_ext_b_plus", [(0x20000, 0x323AF)]),
    ("cjk_compat", [(0xF900, 0xFAFF)]),
    ("kana", [(0x3040, 0x30FF)]),
    ("fullwidth_digits", [(0xFF10, 0xFF19)]),
    ("fullwidth_letters", [(0xFF21, 0xFF3A), (0xFF41, 0xFF5A)]),
    ("fullwidth_punct", [(0xFF01, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65),
                         (0x3000, 0x303F)]),
    ("emoji", [(0x1F300, 0x1FAFF), (0x2600, 0x27BF), (0x1F000, 0x1F2FF)]),
]
# Vocabulary coverage denominators: the CJK blocks as assigned in Unicode 15.1.
CJK_BLOCKS = {"cjk_basic": (0x4E00, 0x9FFF), "cjk_ext_a": (0x3400, 0x4DBF),
              "cjk_ext_b_plus": (0x20000, 0x323AF)}
SPAN_CLASSES = {
    "snake_case": re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"),
    "camelCase": re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]+)+\b"),
    "indentation": re.compile(r"(?m)^[ \t]+(?=\S)"),
    "whitespace_run": re.compile(r"(?<=\S)[ \t]{2,}(?=\S)"),
    "newline_run": re.compile(r"\n{2,}"),
}
SCRIPTS = [("Han", [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x323AF)]),
           ("Kana", [(0x3040, 0x30FF)]), ("Hangul", [(0xAC00, 0xD7AF)]),
           ("Latin", [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x1E00, 0x1EFF)]),
           ("Cyrillic", [(0x400, 0x4FF)]), ("Greek", [(0x370, 0x3FF)]),
           ("Fullwidth", [(0xFF01, 0xFF65)])]


# --------------------------------------------------------------------------- corpus

def read_corpus(paths: list[Path], max_chars: int | None = None) -> list[dict[str, str]]:
    """Documents ``{"text", "lang", "source"}`` from JSONL (plain, .gz, .zst)
    or Parquet files, or directories of them (sorted), in order.

    JSONL records need ``text``; ``lang`` (or ``langid_lang``/``lang_hint``)
    and ``source`` are optional (``und`` / the file name). Parquet files (e.g.
    a version's ``documents/`` parts) are read the same way. Stops before the
    document that would pass ``max_chars`` characters.

    Raises:
        FileNotFoundError: a path does not exist.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.iterdir()
                            if re.search(r"\.(jsonl(\.gz|\.zst)?|parquet)$", f.name))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"tokenizer-report: no corpus file {p}")
    docs, used = [], 0
    for f in files:
        for rec in _records(f):
            text = rec.get("text")
            if not text:
                continue
            if max_chars is not None and used + len(text) > max_chars:
                return docs
            used += len(text)
            lang = rec.get("langid_lang") or rec.get("lang") or rec.get("lang_hint") or "und"
            docs.append({"text": text, "lang": lang,
                         "source": rec.get("source") or f.name.split(".")[0]})
    return docs


def _records(path: Path):
    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
        cols = [c for c in ("text", "lang", "langid_lang", "lang_hint", "source") if c in names]
        yield from pq.read_table(path, columns=cols).to_pylist()
        return
    if path.name.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)
    elif path.name.endswith(".gz"):
        raw = gzip.open(path, "rb")
    else:
        raw = open(path, "rb")
    with io.TextIOWrapper(raw, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


# --------------------------------------------------------------------------- tokenizers

class _Tok:
    """A loaded tokenizer plus what the report needs to know about tokens.

    Files: an HF ``tokenizer.json`` (``tokenizers``), a tiktoken BPE file or
    Mistral's ``tekken.json`` (both through the ``tiktoken`` library, with the
    pre-tokenizer regex of :func:`resolve_pattern` / the file's
    ``config.pattern``). Special tokens in text are ordinary text for every
    kind (``encode_special_tokens`` / ``encode_ordinary``).

    Raises:
        ValueError: the file cannot be read as its kind, or a tiktoken file
            has no pattern (:func:`resolve_pattern`).
    """

    def __init__(self, name: str, path: Path, pattern: str | None = None):
        self.name, self.path = name, str(path)
        self.kind = tokenizer_kind(Path(path))
        self.unk_id = None
        if self.kind == "hf":
            self._init_hf(Path(path))
        else:
            self._init_tiktoken(Path(path), pattern)

    def _init_hf(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.encode_special_tokens = True
        spec = json.loads(self.tokenizer.to_str())
        self.byte_level = "ByteLevel" in json.dumps(spec.get("decoder"))
        self.specials = {t["content"] for t in spec.get("added_tokens", []) if t.get("special")}
        unk = (spec.get("model") or {}).get("unk_token")
        if unk is not None:
            self.unk_id = self.tokenizer.token_to_id(unk)
        self.vocab = self.tokenizer.get_vocab()

    def _init_tiktoken(self, path: Path, pattern: str | None) -> None:
        import base64

        import tiktoken

        ranks: dict[bytes, int] = {}
        if self.kind == "tekken":
            spec = json.loads(path.read_text(encoding="utf-8"))
            cfg = spec["config"]
            inner = cfg.get("default_vocab_size", len(spec["vocab"])) - cfg.get("default_num_special_tokens", 0)
            # mistral_common's Tekkenizer keeps the first default_vocab_size - specials ranks.
            for entry in spec["vocab"][:inner]:
                ranks[base64.b64decode(entry["token_bytes"])] = int(entry["rank"])
            pat = pattern and TIKTOKEN_PATTERNS.get(pattern, pattern) or cfg["pattern"]
        else:
            for line in path.read_bytes().splitlines():
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            pat = resolve_pattern(path, pattern)
        self.encoding = tiktoken.Encoding(f"report-{self.name}", pat_str=pat, mergeable_ranks=ranks,
                                          special_tokens={})
        self.pattern = pat
        self.byte_level, self.specials = True, set()
        self.vocab = {raw: rank for raw, rank in ranks.items()}

    def entry_bytes(self):
        """The raw bytes of every vocabulary entry (None for a special token)."""
        if self.kind != "hf":
            return list(self.vocab)
        return [self.token_bytes(t) for t in self.vocab]

    def token_bytes(self, token: str) -> bytes | None:
        """The raw bytes of a vocabulary entry of an HF tokenizer (None for
        special tokens)."""
        if token in self.specials:
            return None
        if self.byte_level:
            from stages.tokenize import token_bytes

            return token_bytes(token)
        m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)
        if m:
            return bytes([int(m.group(1), 16)])
        return token.replace("\u2581", " ").encode("utf-8")

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text (no special tokens added or matched)."""
        if self.kind == "hf":
            return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
        return [self.encoding.encode_ordinary(t) for t in texts]

    def encode_with_offsets(self, texts: list[str]) -> list[tuple[list[int], np.ndarray, str]]:
        """Per text: (ids, int64[tokens, 2] character offsets, decoded text).

        A token holding part of a character covers the whole character (the
        ``tokenizers`` convention), so a character split over two tokens is
        covered twice: :func:`measure` counts it as byte fallback.
        """
        if self.kind == "hf":
            encs = self.tokenizer.encode_batch(texts, add_special_tokens=False)
            back = self.tokenizer.decode_batch([e.ids for e in encs], skip_special_tokens=False)
            return [(e.ids, np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2), b) for e, b in zip(encs, back)]
        out = []
        for text in texts:
            ids = self.encoding.encode_ordinary(text)
            pieces = [self.encoding.decode_single_token_bytes(i) for i in ids]
            raw = text.encode("utf-8")
            # char index of every byte of the text
            lead = np.frombuffer(raw, np.uint8) & 0xC0 != 0x80
            char_of_byte = np.cumsum(lead) - 1
            ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
            starts = ends - np.asarray([len(p) for p in pieces], dtype=np.int64)
            offsets = np.zeros((len(ids), 2), np.int64)
            if len(ids):
                offsets[:, 0] = char_of_byte[starts]
                offsets[:, 1] = char_of_byte[ends - 1] + 1
            out.append((ids, offsets, b"".join(pieces).decode("utf-8", errors="replace")))
        return out


def _classify_codepoints(cps: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for name, ranges in CHAR_CLASSES:
        mask = np.zeros(cps.shape, bool)
        for lo, hi in ranges:
            mask |= (cps >= lo) & (cps <= hi)
        out[name] = mask
    return out


def _script(text: str) -> str:
    """Script of a token's text: one script, ``digit``, ``space``,
    ``punct/symbol`` or ``mixed``."""
    found = set()
    for ch in text:
        cp = ord(ch)
        if ch.isspace():
            continue
        name = next((s for s, ranges in SCRIPTS if any(lo <= cp <= hi for lo, hi in ranges)), None)
        if name is None:
            name = "digit" if ch.isdigit() else ("other letter" if ch.isalpha() else "punct/symbol")
        found.add(name)
    if not found:
        return "space"
    return found.pop() if len(found) == 1 else "mixed"


def vocabulary_facts(tok: _Tok, longest: int = 15) -> dict[str, Any]:
    """Composition by script, CJK block coverage, the longest tokens.

    Returns:
        ``{"size", "by_script": {script: count}, "cjk_block_coverage":
        {block: {"single_tokens", "block_size", "share"}}, "longest":
        [{"token", "bytes"}]}``. A token that is not valid UTF-8 on its own
        (a piece of a character) counts as ``byte piece``.
    """
    by_script: Counter = Counter()
    single = Counter()
    lengths = []
    for raw in tok.entry_bytes():
        if raw is None:
            by_script["special"] += 1
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            by_script["byte piece"] += 1
            continue
        by_script[_script(text)] += 1
        lengths.append((len(raw), text))
        if len(text) == 1:
            cp = ord(text)
            for block, (lo, hi) in CJK_BLOCKS.items():
                if lo <= cp <= hi:
                    single[block] += 1
    lengths.sort(key=lambda x: (-x[0], x[1]))
    return {
        "size": len(tok.vocab),
        "by_script": dict(sorted(by_script.items(), key=lambda kv: (-kv[1], kv[0]))),
        "cjk_block_coverage": {b: {"single_tokens": single[b], "block_size": hi - lo + 1,
                                   "share": single[b] / (hi - lo + 1)}
                               for b, (lo, hi) in CJK_BLOCKS.items()},
        "longest": [{"token": t, "bytes": n} for n, t in lengths[:longest]],
    }


# --------------------------------------------------------------------------- measuring

def _new_group() -> dict[str, Any]:
    return {"documents": 0, "chars": 0, "bytes": 0, "words": 0, "tokens": 0, "round_trip_ok": 0,
            "unknown_tokens": 0, "fallback_chars": 0,
            "classes": defaultdict(lambda: [0, 0]), "spans": defaultdict(lambda: [0, 0, 0])}


def _finish(g: dict[str, Any]) -> dict[str, Any]:
    tokens = max(g["tokens"], 1)
    return {
        "documents": g["documents"], "chars": g["chars"], "bytes": g["bytes"],
        "words": g["words"], "tokens": g["tokens"],
        "chars_per_token": g["chars"] / tokens, "bytes_per_token": g["bytes"] / tokens,
        "tokens_per_word": g["tokens"] / g["words"] if g["words"] else None,
        "round_trip": g["round_trip_ok"] / g["documents"] if g["documents"] else None,
        "unknown_rate": g["unknown_tokens"] / tokens,
        "byte_fallback_rate": g["fallback_chars"] / g["chars"] if g["chars"] else None,
        # class: occurrences, share that came out whole (not byte pieces)
        "char_classes": {k: {"occurrences": n, "whole_share": (n - split) / n}
                         for k, (n, split) in sorted(g["classes"].items()) if n},
        # span: occurrences, tokens per span, share that is one token
        "spans": {k: {"occurrences": n, "tokens_per_span": t / n, "single_token_share": one / n}
                  for k, (n, t, one) in sorted(g["spans"].items()) if n},
    }


def measure(tok: _Tok, docs: list[dict[str, str]], batch: int = 256) -> dict[str, Any]:
    """Per-group metrics of one tokenizer on ``docs``.

    Returns:
        ``{"all": m, "language": {lang: m}, "source": {src: m}}`` where each m
        holds counts (documents, chars, bytes, words, tokens) and the rates of
        the module docstring.
    """
    from stages.text import words

    groups: dict[str, dict[str, Any]] = defaultdict(_new_group)
    for lo in range(0, len(docs), batch):
        chunk = docs[lo:lo + batch]
        for doc, (ids, offsets, back) in zip(chunk, tok.encode_with_offsets([d["text"] for d in chunk])):
            text = doc["text"]
            n = len(text)
            cover = np.zeros(n + 1, np.int64)
            np.add.at(cover, offsets[:, 0], 1)
            np.add.at(cover, offsets[:, 1], -1)
            split = np.cumsum(cover)[:n] >= 2
            cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            classes = {k: (int(m.sum()), int((m & split).sum()))
                       for k, m in _classify_codepoints(cps).items()}
            starts, ends = offsets[:, 0], offsets[:, 1]
            spans = {}
            for name, rx in SPAN_CLASSES.items():
                found = [(m.start(), m.end()) for m in rx.finditer(text)]
                if not found:
                    continue
                a = np.asarray(found, np.int64)
                count = np.searchsorted(starts, a[:, 1], "left") - np.searchsorted(ends, a[:, 0], "right")
                spans[name] = (len(found), int(count.sum()), int((count == 1).sum()))
            n_words = len(words(text, doc["lang"]))
            unk = sum(1 for i in ids if i == tok.unk_id) if tok.unk_id is not None else 0
            for key in ("all", f"language:{doc['lang']}", f"source:{doc['source']}"):
                g = groups[key]
                g["documents"] += 1
                g["chars"] += n
                g["bytes"] += len(text.encode("utf-8"))
                g["words"] += n_words
                g["tokens"] += len(ids)
                g["round_trip_ok"] += back == text
                g["unknown_tokens"] += unk
                g["fallback_chars"] += int(split.sum())
                for k, (c, s) in classes.items():
                    g["classes"][k][0] += c
                    g["classes"][k][1] += s
                for k, (c, t, one) in spans.items():
                    for i, v in enumerate((c, t, one)):
                        g["spans"][k][i] += v
    out: dict[str, Any] = {"all": _finish(groups["all"]), "language": {}, "source": {}}
    for key in sorted(groups):
        if ":" in key:
            kind, name = key.split(":", 1)
            out[kind][name] = _finish(groups[key])
    return out


def fragmented_words(tok: _Tok, docs: list[dict[str, str]], top_frequent: int = 300,
                     show: int = 10) -> dict[str, list[dict[str, Any]]]:
    """Per language: of the ``top_frequent`` most frequent words (2+
    characters), the ``show`` that take the most tokens (ties: more frequent
    first). A word of a space-separated language is encoded with a leading
    space, as it occurs inside running text."""
    from stages.text import CJK_LANGS, words

    freq: dict[str, Counter] = defaultdict(Counter)
    for doc in docs:
        freq[doc["lang"]].update(w for w in words(doc["text"], doc["lang"]) if len(w) >= 2)
    out = {}
    for lang in sorted(freq):
        common = freq[lang].most_common(top_frequent)
        if not common:
            continue
        prefix = "" if lang in CJK_LANGS else " "
        encs = tok.encode_ids([prefix + w for w, _ in common])
        rows = sorted(((len(e), c, w) for (w, c), e in zip(common, encs)), key=lambda r: (-r[0], -r[1], r[2]))
        out[lang] = [{"word": w, "count": c, "tokens": t} for t, c, w in rows[:show]]
    return out


def run_report(tokenizers: dict[str, Path], docs: list[dict[str, str]],
               patterns: dict[str, str] | None = None, references: list[str] | None = None) -> dict[str, Any]:
    """Measure every tokenizer on the same ``docs``.

    Args:
        tokenizers: display name -> tokenizer file (HF ``tokenizer.json``,
            tiktoken BPE file or ``tekken.json``: :class:`_Tok`), in column order.
        docs: from :func:`read_corpus` (or the build's held-out split).
        patterns: name -> pre-tokenizer regex or preset for tiktoken files
            (:func:`resolve_pattern`).
        references: the names that are reference tokenizers (compared
            against the first other one in :func:`comparison_lines`).

    Returns:
        ``{"corpus": {documents, chars, languages, sources}, "references": [names],
        "tokenizers": {name: {"path", "kind", "metrics", "vocabulary", "fragmented_words"}}}``.
    """
    report: dict[str, Any] = {
        "corpus": {"documents": len(docs), "chars": sum(len(d["text"]) for d in docs),
                   "languages": dict(sorted(Counter(d["lang"] for d in docs).items())),
                   "sources": dict(sorted(Counter(d["source"] for d in docs).items()))},
        "references": [n for n in tokenizers if n in set(references or ())],
        "tokenizers": {},
    }
    for name, path in tokenizers.items():
        tok = _Tok(name, path, (patterns or {}).get(name))
        report["tokenizers"][name] = {"path": str(path), "kind": tok.kind, "metrics": measure(tok, docs),
                                      "vocabulary": vocabulary_facts(tok),
                                      "fragmented_words": fragmented_words(tok, docs)}
    return report


def comparison_lines(report: dict[str, Any], metric: str = "chars_per_token") -> list[str]:
    """One line per language (then ``all``): the first non-reference
    tokenizer against each reference, e.g. ``"zh: 1.50 vs qwen 1.65
    chars/token"``. Empty without references."""
    refs = [n for n in report.get("references", []) if n in report["tokenizers"]]
    ours = [n for n in report["tokenizers"] if n not in refs]
    if not refs or not ours:
        return []
    unit = {"chars_per_token": "chars/token", "bytes_per_token": "bytes/token"}.get(metric, metric)
    m0 = report["tokenizers"][ours[0]]["metrics"]
    lines = []
    for lang in [*m0["language"], "all"]:
        g = m0["all"] if lang == "all" else m0["language"][lang]
        others = []
        for r in refs:
            mr = report["tokenizers"][r]["metrics"]
            gr = mr["all"] if lang == "all" else mr["language"].get(lang)
            if gr is not None:
                others.append(f"{r} {gr[metric]:.2f}")
        lines.append(f"{lang}: {g[metric]:.2f} vs {', '.join(others)} {unit}")
    return lines


def check_thresholds(report: dict[str, Any], min_round_trip: float = 1.0,
                     max_byte_fallback_rate: float | None = None,
                     min_chars_per_token: dict[str, float] | None = None,
                     max_unknown_rate: float = 0.0) -> list[str]:
    """One warning line per missed threshold, per tokenizer (references
    excepted) and language (``all`` for the whole corpus); empty when every
    threshold is met."""
    warnings = []
    for name, t in report["tokenizers"].items():
        if name in report.get("references", ()):
            continue  # a reference is compared against, not checked
        m = t["metrics"]
        for lang, g in [("all", m["all"]), *m["language"].items()]:
            if g["round_trip"] is not None and g["round_trip"] < min_round_trip:
                warnings.append(f"tokenizer {name}, language {lang}: round trip {g['round_trip']:.4f} < {min_round_trip}")
            if g["unknown_rate"] > max_unknown_rate:
                warnings.append(f"tokenizer {name}, language {lang}: unknown-token rate {g['unknown_rate']:.4f} > {max_unknown_rate}")
            fb = g["byte_fallback_rate"]
            if max_byte_fallback_rate is not None and fb is not None and fb > max_byte_fallback_rate:
                warnings.append(f"tokenizer {name}, language {lang}: byte-fallback rate {fb:.4f} > {max_byte_fallback_rate}")
            need = (min_chars_per_token or {}).get(lang)
            if need is not None and g["chars_per_token"] < need:
                warnings.append(f"tokenizer {name}, language {lang}: {g['chars_per_token']:.3f} chars/token < {need}")
    return warnings


# --------------------------------------------------------------------------- writing

def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "–"
    if pct:
        return f"{100 * v:.2f}%"
    return f"{v:,.3f}" if isinstance(v, float) else f"{v:,}"


def headline_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The headline table: one row per language (then ``all``), for each
    tokenizer chars/token, bytes/token, tokens/word, round trip, unknown and
    byte-fallback rates."""
    names = list(report["tokenizers"])
    head = ["language", "docs", "chars"]
    short = {"chars_per_token": "chars/tok", "bytes_per_token": "bytes/tok",
             "tokens_per_word": "tok/word", "round_trip": "round trip",
             "unknown_rate": "unk", "byte_fallback_rate": "byte fallback"}
    for n in names:
        head += [f"{n} {short[k]}" for k in HEADLINE]
    first = report["tokenizers"][names[0]]["metrics"] if names else {"language": {}, "all": {}}
    rows = []
    for lang in [*first["language"], "all"]:
        g0 = first["all"] if lang == "all" else first["language"][lang]
        row = [f"**{lang}**" if lang == "all" else lang, _fmt(g0["documents"]), _fmt(g0["chars"])]
        for n in names:
            m = report["tokenizers"][n]["metrics"]
            g = m["all"] if lang == "all" else m["language"][lang]
            row += [_fmt(g[k], pct=k in ("round_trip", "unknown_rate", "byte_fallback_rate")) for k in HEADLINE]
        rows.append(row)
    return head, rows


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def to_markdown(report: dict[str, Any], warnings: list[str] | None = None) -> str:
    """The report as Markdown (headline table first)."""
    names = list(report["tokenizers"])
    c = report["corpus"]
    out = [f"# Tokenizer coverage report: {', '.join(names)}", "",
           f"Corpus: {c['documents']:,} documents, {c['chars']:,} characters; languages "
           + ", ".join(f"{k} {v}" for k, v in c["languages"].items()) + ".", ""]
    if warnings is not None:
        out += ["## Threshold warnings", ""] + ([f"* {w}" for w in warnings] or ["none"]) + [""]
    compare = comparison_lines(report)
    if compare:
        out += ["## Against the reference tokenizers (characters per token)", ""] + [f"* {x}" for x in compare] + [""]
    head, rows = headline_rows(report)
    out += ["## Headline (per language)", "", _md_table(head, rows), ""]
    for n in names:
        t = report["tokenizers"][n]
        m = t["metrics"]
        ref = " (reference)" if n in report.get("references", ()) else ""
        out += [f"## {n}{ref} (`{t['path']}`)", "", "### Per source", ""]
        out.append(_md_table(["source", "docs", "chars/tok", "bytes/tok", "tok/word", "round trip",
                              "byte fallback"],
                             [[s, _fmt(g["documents"]), _fmt(g["chars_per_token"]), _fmt(g["bytes_per_token"]),
                               _fmt(g["tokens_per_word"]), _fmt(g["round_trip"], True),
                               _fmt(g["byte_fallback_rate"], True)] for s, g in m["source"].items()]))
        out += ["", "### Character classes and spans (whole corpus)", ""]
        out.append(_md_table(["class", "occurrences", "whole (not byte pieces)"],
                             [[k, _fmt(v["occurrences"]), _fmt(v["whole_share"], True)]
                              for k, v in m["all"]["char_classes"].items()]))
        out.append("")
        out.append(_md_table(["span", "occurrences", "tokens per span", "one token"],
                             [[k, _fmt(v["occurrences"]), _fmt(v["tokens_per_span"]),
                               _fmt(v["single_token_share"], True)] for k, v in m["all"]["spans"].items()]))
        v = t["vocabulary"]
        out += ["", f"### Vocabulary ({v['size']:,} entries)", "",
                "By script: " + ", ".join(f"{k} {n_}" for k, n_ in v["by_script"].items()) + ".", "",
                _md_table(["CJK block", "single-token characters", "block size", "share"],
                          [[b, _fmt(x["single_tokens"]), _fmt(x["block_size"]), _fmt(x["share"], True)]
                           for b, x in v["cjk_block_coverage"].items()]), "",
                "Longest tokens: " + ", ".join(f"`{x['token']!r}` ({x['bytes']} B)" for x in v["longest"]), "",
                "### Most fragmented frequent words", ""]
        for lang, rows_ in t["fragmented_words"].items():
            out.append(f"* {lang}: " + ", ".join(f"{r['word']} ({r['tokens']} tok, ×{r['count']})" for r in rows_))
        out.append("")
    return "\n".join(out)


# No date (determinism) and no RDF metadata block (no external namespace URLs in the page).
_SVG_METADATA = {"Date": None, "Format": None, "Type": None, "Creator": None}


def _svg_plots(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, inline SVG) plots; matplotlib with the Agg backend and its
    default style, whatever other code set globally (so the bytes depend only
    on the report)."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({"svg.hashsalt": "mindcorpus", "svg.fonttype": "none"})
        return _draw(report)


def _draw(report: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib.pyplot as plt

    names = list(report["tokenizers"])
    if not names:
        return []
    langs = list(report["tokenizers"][names[0]]["metrics"]["language"])
    plots = []

    def bars(title, metric, scale=1.0, ylabel=""):
        fig, ax = plt.subplots(figsize=(8, 3.2))
        width = 0.8 / len(names)
        for i, n in enumerate(names):
            m = report["tokenizers"][n]["metrics"]["language"]
            vals = [(m[l][metric] or 0) * scale for l in langs]
            ax.bar(np.arange(len(langs)) + i * width, vals, width, label=n)
        ax.set_xticks(np.arange(len(langs)) + width * (len(names) - 1) / 2, langs)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata=_SVG_METADATA)
        plt.close(fig)
        plots.append((title, buf.getvalue()[buf.getvalue().find("<svg"):]))

    bars("Characters per token by language", "chars_per_token", ylabel="chars/token")
    bars("Tokens per word (fertility) by language", "tokens_per_word", ylabel="tokens/word")
    bars("Byte-fallback rate by language", "byte_fallback_rate", 100, "% of characters")
    fig, ax = plt.subplots(figsize=(8, 3.2))
    scripts = sorted({s for n in names for s in report["tokenizers"][n]["vocabulary"]["by_script"]})
    bottom = np.zeros(len(names))
    for s in scripts:
        vals = np.array([report["tokenizers"][n]["vocabulary"]["by_script"].get(s, 0) for n in names], float)
        ax.bar(names, vals, bottom=bottom, label=s)
        bottom += vals
    ax.set_title("Vocabulary composition by script")
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata=_SVG_METADATA)
    plt.close(fig)
    plots.append(("Vocabulary composition by script", buf.getvalue()[buf.getvalue().find("<svg"):]))
    return plots


def to_html(report: dict[str, Any], warnings: list[str] | None = None) -> str:
    """A self-contained HTML page: headline table, plots (inline SVG), and
    the full Markdown report as preformatted text. No external resources."""
    head, rows = headline_rows(report)
    table = ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{html.escape(c.strip('*'))}</td>" for c in r) + "</tr>"
                       for r in rows) + "</table>")
    warn = ""
    if warnings is not None:
        warn = "<h2>Threshold warnings</h2><ul>" + ("".join(f"<li>{html.escape(w)}</li>" for w in warnings)
                                                     or "<li>none</li>") + "</ul>"
    plots = "".join(f"<h2>{html.escape(t)}</h2>{svg}" for t, svg in _svg_plots(report))
    lines = comparison_lines(report)
    compare = ("<h2>Against the reference tokenizers</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines)
               + "</ul>") if lines else ""
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}pre{white-space:pre-wrap}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Tokenizer report</title>"
            f"<style>{style}</style></head><body><h1>Tokenizer coverage report</h1>{compare}{warn}"
            f"<h2>Headline</h2>{table}{plots}<h2>Full report</h2>"
            f"<pre>{html.escape(to_markdown(report, warnings))}</pre></body></html>")


def write_report(report: dict[str, Any], out_dir: Path, warnings: list[str] | None = None,
                 html_page: bool = True) -> list[Path]:
    """Write ``tokenizer_report.{json,md,html}`` under ``out_dir`` (created).
    Output is deterministic for the same report (sorted keys, no times)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {**report, "warnings": warnings} if warnings is not None else report
    paths = [out_dir / f"{REPORT_STEM}.json", out_dir / f"{REPORT_STEM}.md"]
    paths[0].write_text(json.dumps(body, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    paths[1].write_text(to_markdown(report, warnings), encoding="utf-8")
    if html_page:
        paths.append(out_dir / f"{REPORT_STEM}.html")
        page = to_html(report, warnings)
        page = re.sub(r"<dc:date>.*?</dc:date>", "", page, flags=re.DOTALL)
        paths[2].write_text(page, encoding="utf-8")
    return paths


# --------------------------------------------------------------------------- build

def heldout_documents(partition_paths: list[Path], seed: int, fraction: float,
                      max_chars: int) -> list[dict[str, str]]:
    """The held-out split of a build (:func:`stages.tokenize.is_heldout`),
    kept documents in partition order, at most ``max_chars`` characters."""
    from stages.base import read_kept
    from stages.tokenize import is_heldout, language_column

    docs, used = [], 0
    for path in partition_paths:
        lang_col = language_column(path)
        table = read_kept(path, ["id", "source", "text"] + ([lang_col] if lang_col else []))
        langs = table[lang_col].to_pylist() if lang_col else [None] * table.num_rows
        for doc_id, source, text, lang in zip(table["id"].to_pylist(), table["source"].to_pylist(),
                                              table["text"].to_pylist(), langs):
            if not text or not is_heldout(doc_id, seed, fraction):
                continue
            if used + len(text) > max_chars:
                return docs
            used += len(text)
            docs.append({"text": text, "lang": lang or "und", "source": source})
    return docs


def build_report(tokenize_config, partition_paths: list[Path], tokenizer_path: Path,
                 version_dir: Path, seed: int, log=print) -> dict[str, Any]:
    """Run the report for a build's tokenizer on its held-out split, write it
    to ``version_dir/tokenizer_report/`` and log one line per missed threshold.

    Returns:
        the manifest entry: ``{"dir", "heldout_documents", "heldout_chars",
        "headline": {lang: {metric: value}}, "references": {name: {"path",
        "kind", "headline"}}, "comparison": [lines of :func:`comparison_lines`],
        "warnings": [...]}``. The references are the config's
        ``tokenize.report_reference_tokenizers``, measured on the same text.
    """
    cfg = tokenize_config
    docs = heldout_documents(partition_paths, seed, cfg.heldout_fraction, cfg.heldout_max_chars)
    configured = getattr(cfg, "reference_tokenizers", dict)()  # a plugin's tokenizer config may have none
    refs = {name: ref.path for name, ref in configured.items()}
    report = run_report({"version": Path(tokenizer_path), **{n: Path(p) for n, p in refs.items()}}, docs,
                        patterns={n: r.pattern for n, r in configured.items() if r.pattern},
                        references=list(refs))
    report["tokenizers"]["version"]["path"] = TOKENIZER  # the version's own, not the tmp path
    warnings = check_thresholds(report, cfg.report_min_round_trip, cfg.report_max_byte_fallback_rate,
                                cfg.report_min_chars_per_token)
    out = Path(version_dir) / TOKENIZER_REPORT_DIR
    write_report(report, out, warnings)
    for w in warnings:
        log(f"[tokenizer-report] WARNING {w}")
    m = report["tokenizers"]["version"]["metrics"]
    compare = comparison_lines(report)
    for line in compare:
        log(f"[tokenizer-report] {line}")
    return {"dir": TOKENIZER_REPORT_DIR, "heldout_documents": len(docs),
            "heldout_chars": report["corpus"]["chars"],
            "headline": {lang: {k: g[k] for k in HEADLINE}
                         for lang, g in [*m["language"].items(), ("all", m["all"])]},
            "references": {n: {"path": refs[n], "kind": report["tokenizers"][n]["kind"],
                               "headline": {lang: {k: g[k] for k in HEADLINE} for lang, g in
                                            [*report["tokenizers"][n]["metrics"]["language"].items(),
                                             ("all", report["tokenizers"][n]["metrics"]["all"])]}}
                           for n in refs},
            "comparison": compare,
            "warnings": warnings}
