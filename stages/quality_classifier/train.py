"""Training side of the quality classifier: the text fastText sees, the seeded
sample of positives and negatives (read through ``Partitions.map``), the
cached training run of the fastText command-line tool, and held-out precision
and recall. Inference is :mod:`stages.quality_classifier.model`."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stages.base import read_kept

#: Version of :func:`model_text`; part of the model cache key (bump it when the
#: preprocessing changes, so no model trained on other text is reused).
TEXT_VERSION = 1
#: The fastText release tools/build_fasttext.sh builds (part of the cache key).
FASTTEXT_VERSION = "0.9.3"
#: The two labels of the supervised model.
LABEL_REFERENCE = "__label__reference"
LABEL_CORPUS = "__label__corpus"
#: The model key of the one multilingual model (``per_language: false``).
ALL = "*"
#: Salts of the three seeded id hashes (draw into the sample, held-out split,
#: training order), so the three decisions are independent.
_DRAW_SALT = 0x51C1A55
_HOLDOUT_SALT = 0x40D07
_ORDER_SALT = 0x0DE5

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def model_text(text: str, max_chars: int) -> str:
    """What fastText sees of a document, in training and scoring alike: its
    first ``max_chars`` characters, lowercased, on one line with runs of
    whitespace collapsed to one space; text with CJK characters is first cut
    into words with rjieba (jieba's Rust port, which the project uses for
    Chinese elsewhere), since fastText splits words on whitespace only. A
    literal ``__label__`` is defused (fastText would read it as a label).

    Args:
        text: the document (str, any length).
        max_chars: characters kept (the cut is before segmentation).
    Returns:
        One line (no ``\\n``), possibly empty. O(max_chars).
    """
    text = text[:max_chars].lower().replace("__label__", "label ")
    if _CJK.search(text):
        import rjieba

        text = " ".join(rjieba.cut(text))
    return " ".join(text.split())


def _key(lang: str | None, per_language: bool) -> str | None:
    return (lang if lang is not None else None) if per_language else ALL


def _documents(path, per_language: bool) -> Iterator[tuple[str, str, str | None, str]]:
    columns = ["id", "source", "text"] + (["langid_lang"] if per_language else [])
    table = read_kept(path, columns)
    langs = table["langid_lang"].to_pylist() if per_language else [None] * table.num_rows
    yield from zip(table["id"].to_pylist(), table["source"].to_pylist(), langs, table["text"].to_pylist())


def count_documents(path, reference_source: str | None, per_language: bool,
                    languages: list[str] | None) -> dict[str, list[int]]:
    """Candidates of one partition: model key (language, or :data:`ALL`) ->
    ``[positives, negatives]`` (documents of ``reference_source`` /
    the others; with ``reference_source`` None every document is a negative).
    Documents without a language (per-language) are not candidates.
    Top-level so ``Partitions.map`` can pickle it. O(partition)."""
    out: dict[str, list[int]] = {}
    for _, source, lang, _ in _documents(path, per_language):
        key = _key(lang, per_language)
        if key is None or (languages is not None and key not in languages):
            continue
        out.setdefault(key, [0, 0])[0 if source == reference_source else 1] += 1
    return out


def _take(doc_id: str, probability: float, seed: int) -> bool:
    from common.hashing import id_hash

    return id_hash(doc_id, seed ^ _DRAW_SALT) < probability * 2.0 ** 64


def is_held_out(doc_id: str, seed: int, holdout_fraction: float) -> bool:
    """Whether a document is in the held-out split (a seeded id hash below
    ``holdout_fraction``; independent of the draw into the sample)."""
    from common.hashing import id_hash

    return id_hash(doc_id, seed ^ _HOLDOUT_SALT) < holdout_fraction * 2.0 ** 64


def _sampled(doc_id: str, key: str, label: str, text: str, seed: int, held_out: bool,
             max_chars: int) -> tuple[str, str, bool, int, str]:
    from common.hashing import id_hash

    return key, label, held_out, id_hash(doc_id, seed ^ _ORDER_SALT), model_text(text, max_chars)


def sample_documents(path, reference_source: str | None, per_language: bool, languages: list[str] | None,
                     draw: dict[str, tuple[float, float, float]], seed: int, holdout_fraction: float,
                     max_chars: int) -> list[tuple[str, str, bool, int, str]]:
    """The sampled documents of one partition.

    Args:
        draw: model key -> probabilities of taking (a positive, a negative
            outside the held-out split, a held-out negative), applied to a
            seeded hash of the document id (the same document is taken
            whatever the partitioning or worker count). Training negatives
            are drawn at a lower rate than held-out ones when the classes
            are balanced (``negatives_per_positive``); the held-out
            negatives stay a sample of the corpus as it is.
    Returns:
        ``(key, label, held_out, order, text)`` per taken document: label
        :data:`LABEL_REFERENCE` or :data:`LABEL_CORPUS`, ``held_out``
        (:func:`is_held_out`), ``order`` a third seeded hash (the
        training file's order), ``text`` :func:`model_text`. O(taken
        documents x max_chars) memory. Top-level for ``Partitions.map``.
    """
    out = []
    for doc_id, source, lang, text in _documents(path, per_language):
        key = _key(lang, per_language)
        if key is None or key not in draw:
            continue
        positive = source == reference_source
        held_out = is_held_out(doc_id, seed, holdout_fraction)
        rate = draw[key][0] if positive else draw[key][2 if held_out else 1]
        if _take(doc_id, rate, seed):
            out.append(_sampled(doc_id, key, LABEL_REFERENCE if positive else LABEL_CORPUS, text, seed,
                                held_out, max_chars))
    return out


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    if path.suffix == ".zst":
        import zstandard

        raw = open(path, "rb")
        return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True),
                                encoding="utf-8")
    return open(path, encoding="utf-8")


def reference_file_documents(paths: list[str]) -> Iterator[tuple[str, str]]:
    """``(id, text)`` of each document of the JSONL ``reference_files`` (id
    ``"<file>:<line>"``, text the ``text`` field), in file and line order;
    lines that are not a JSON object with a non-empty string ``text`` are
    skipped. Streams: O(one line) memory.

    Raises:
        OSError: a file cannot be read (``preflight`` checked it first).
    """
    for name in paths:
        with _open_text(Path(name)) as fh:
            for number, line in enumerate(fh, 1):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                text = record.get("text") if isinstance(record, dict) else None
                if isinstance(text, str) and text.strip():
                    yield f"{name}:{number}", text


def check_reference_files(paths: list[str]) -> list[str]:
    """Preflight of ``reference_files``: one line per file that is missing or
    holds no document (first 1,000 lines read), else none."""
    errors = []
    for i, name in enumerate(paths):
        path = Path(name)
        if not path.is_file():
            errors.append(f"quality_classifier.reference_files.{i}: {name}: no such file")
            continue
        try:
            with _open_text(path) as fh:
                found = False
                for _, line in zip(range(1000), fh):
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and isinstance(record.get("text"), str):
                        found = True
                        break
        except (OSError, UnicodeDecodeError, EOFError) as exc:
            errors.append(f"quality_classifier.reference_files.{i}: {name}: unreadable ({exc})")
            continue
        if not found:
            errors.append(f"quality_classifier.reference_files.{i}: {name}: no JSON line with a text field "
                          "in its first 1,000 lines")
    return errors


def training_lines(label: str, text: str, chunk_words: int) -> list[str]:
    """The training lines of one document: ``"<label> <words>"`` for each run
    of ``chunk_words`` words of its :func:`model_text` (the last may be
    shorter; none for an empty text). fastText's supervised model averages
    one vector per word and n-gram of a line, so one line of a long document
    is one weak example; cut into chunks, the same text gives many examples
    and the model learns (measured: docs/stages/quality_classifier.md)."""
    words = text.split()
    return [f"{label} {' '.join(words[i:i + chunk_words])}" for i in range(0, len(words), chunk_words)]


def training_flags(cfg, seed: int) -> list[str]:
    """The ``fasttext supervised`` flags for ``cfg`` (a :class:`Config`):
    one thread and a fixed seed, so the same input gives the same model bytes
    (measured: docs/stages/quality_classifier.md)."""
    return ["-epoch", str(cfg.epoch), "-lr", repr(float(cfg.lr)), "-wordNgrams", str(cfg.word_ngrams),
            "-dim", str(cfg.dim), "-bucket", str(cfg.bucket), "-minCount", str(cfg.min_count),
            "-loss", "softmax", "-thread", "1", "-seed", str(seed & 0x7FFFFFFF), "-verbose", "0"]


def train_model(lines: list[str], flags: list[str], tools_dir: Path, cache_dir: Path) -> tuple[Path, bool]:
    """Train (or fetch from cache) a fastText supervised model.

    Runs ``tools_dir/fasttext supervised -input TRAIN -output MODEL FLAGS``
    (tools/build_fasttext.sh builds it). The cache key is the sha256 of
    :data:`TEXT_VERSION`, :data:`FASTTEXT_VERSION`, the flags and the
    training lines (each ``"<label> <text>"``); a model under
    ``cache_dir/quality_classifier/<key>/model.bin`` is reused.

    Args:
        lines: training lines, in training order (no ``\\n`` inside).
        flags: :func:`training_flags`.
    Returns:
        ``(path of model.bin, trained)``: ``trained`` False on a cache hit.
    Raises:
        FileNotFoundError: the tool is missing (the message says how to build it).
        ToolError: fastText failed (command, exit status, stderr tail).
    """
    from common.errors import ToolError

    tool = Path(tools_dir) / "fasttext"
    if not os.access(tool, os.X_OK):
        raise FileNotFoundError(f"quality_classifier: {tool} not found or not executable; "
                                "run tools/build_fasttext.sh (make setup-build)")
    root = Path(cache_dir) / "quality_classifier"
    root.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps([TEXT_VERSION, FASTTEXT_VERSION, flags]).encode())
    with tempfile.TemporaryDirectory(dir=root, prefix=".train-") as tmp:
        text_path = Path(tmp) / "train.txt"
        with open(text_path, "w", encoding="utf-8") as fh:
            for line in lines:
                line = line + "\n"
                fh.write(line)
                digest.update(line.encode())
        final = root / digest.hexdigest()
        model = final / "model.bin"
        if model.is_file():
            return model, False
        cmd = [str(tool), "supervised", "-input", str(text_path), "-output", str(Path(tmp) / "model"), *flags]
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            tail = [ln.strip()[:300] for ln in proc.stderr.splitlines() if ln.strip()]
            raise ToolError(cmd, proc.returncode, tail[-5:], who="quality_classifier")
        staged = Path(tmp) / "out"
        staged.mkdir()
        os.replace(Path(tmp) / "model.bin", staged / "model.bin")
        try:
            os.replace(staged, final)  # atomic; a concurrent builder may win the race
        except OSError:
            if not model.is_file():
                raise
    return model, True


def precision_recall(scores: list[float], labels: list[bool], threshold: float) -> dict[str, Any]:
    """Precision and recall of "reference" (score >= ``threshold``) against
    the true labels (True: reference).

    Returns:
        ``{"threshold", "precision", "recall", "positives", "negatives"}``;
        precision/recall None when undefined (nothing predicted / no positive).
    """
    tp = sum(1 for s, y in zip(scores, labels) if y and s >= threshold)
    fp = sum(1 for s, y in zip(scores, labels) if not y and s >= threshold)
    pos = sum(labels)
    return {"threshold": threshold, "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / pos, 4) if pos else None, "positives": pos, "negatives": len(labels) - pos}


def roc_auc(scores: list[float], labels: list[bool]) -> float | None:
    """Area under the ROC curve of the scores for the labels (True:
    reference): the chance that a random reference document outscores a
    random corpus document, ties counting one half (Mann-Whitney U). None
    without both classes. O(n log n)."""
    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    rank_sum, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        mean_rank = (i + j) / 2 + 1
        rank_sum += mean_rank * sum(1 for k in order[i:j + 1] if labels[k])
        i = j + 1
    return round((rank_sum - pos * (pos + 1) / 2) / (pos * neg), 4)


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated ``q`` quantile (0..1) of non-empty sorted values
    (numpy's default method)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
