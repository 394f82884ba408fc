"""The word n-gram engine of Gopher's repetition rules.

:func:`ngram_stats_batch` counts the word n-grams (n = 2..10) of many
documents at once, exactly (no hashing), with numpy reductions over the whole
batch; :attr:`stages.heuristics.view.Document.ngram_stats` holds one
document's result and :mod:`stages.heuristics.gopher_repetition` reads it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def ngram_stats_batch(word_lists: list[list[str]],
                      run_starts: list[list[int]] | None = None,
                      other_chars: list[int] | None = None) -> list[dict[str, float | None]]:
    """Gopher's word n-gram repetition values of many documents at once.

    Args:
        word_lists: each document's words (:func:`stages.text.words`).
        run_starts: per document, the word indices (ascending, in
            ``1..len(words)-1``) where a run of adjacent words begins after a
            gap (:attr:`stages.heuristics.view.Document.ngram_run_starts`: a
            Han/kana part left out of an English page); no n-gram spans a gap,
            so two English words that a Japanese sentence separates are not a
            2-gram. None (the default): every document is one run.
        other_chars: per document, characters of words left out of the
            n-grams that still belong to the text (the Han/kana part of an
            English page: :attr:`stages.heuristics.view.Document.ngram_other_chars`);
            added to the denominator of every share, so a partly translated
            page is judged on all its text, not on its untranslated
            remainder alone. None: 0 for every document.

    Returns:
        One dict per document with ``top_{n}gram_char_share`` (n = 2, 3, 4)
        and ``duplicate_{n}gram_char_share`` (n = 5..10), see
        :attr:`stages.heuristics.view.Document.ngram_stats` for the
        definitions.

    Method: the words of all documents are concatenated and numbered once
    (Arrow hash dictionary encoding); an n-gram's id is the dense id of (id
    of its (n-1)-gram prefix, id of its last word), starting from (document,
    word), so ids are exact (no hashing) and never shared across documents;
    counts, per-document maxima and covered characters are numpy reductions
    over the whole batch, and only n-grams whose two (n-1)-grams both repeat
    are numbered at level n. The loop over n stops when no n-gram repeats in
    any document (no longer one can then).
    """
    out: list[dict[str, float | None]] = []
    for words in word_lists:
        size = len(words) if any(words) else 0
        out.append({name: (None if size < n else 0.0) for n, name in _NGRAM_NAMES})
    sel = [i for i, words in enumerate(word_lists) if len(words) >= 2]
    if not sel:
        return out
    doc_words = np.array([len(word_lists[i]) for i in sel], np.int64)
    flat = pa.array([w for i in sel for w in word_lists[i]], pa.string())
    encoded = flat.dictionary_encode()
    ids = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    num_ids = len(encoded.dictionary)
    lengths = pc.utf8_length(flat).to_numpy(zero_copy_only=False).astype(np.int64)
    total = len(ids)
    starts = np.zeros(len(sel), np.int64)
    np.cumsum(doc_words[:-1], out=starts[1:])
    doc_of = np.repeat(np.arange(len(sel)), doc_words)
    csum = np.zeros(total + 1, np.int64)
    np.cumsum(lengths, out=csum[1:])
    word_chars = np.add.reduceat(lengths, starts)
    if other_chars is not None:
        word_chars = word_chars + np.array([other_chars[i] for i in sel], np.int64)
    # Words from s to the end of its run (a document is one run unless
    # run_starts cuts it): an n-gram at s exists only if left >= n.
    run_start = np.zeros(total, bool)
    run_start[starts] = True
    if run_starts is not None:
        for j, i in enumerate(sel):
            if run_starts[i]:
                run_start[starts[j] + np.asarray(run_starts[i], np.int64)] = True
    bounds = np.append(np.flatnonzero(run_start), total)
    run_of = np.cumsum(run_start) - 1
    left = bounds[run_of + 1] - np.arange(total)
    keys = _dense(doc_of * num_ids + ids)
    repeated = np.bincount(keys)[keys] > 1       # the (n-1)-gram at s occurs twice or more
    for n in range(2, 11):
        # An n-gram at s can repeat only if the (n-1)-grams at s and s+1 do.
        candidate = repeated & (left >= n)
        candidate[:-1] &= repeated[1:]
        index = np.flatnonzero(candidate)
        if len(index) == 0:
            break
        grams = _dense(keys[index] * num_ids + ids[index + n - 1])
        gram_counts = np.bincount(grams)
        if gram_counts.max() < 2:
            break
        counts = np.zeros(total, np.int64)
        counts[index] = gram_counts[grams]
        repeated = counts > 1
        keys = np.zeros(total, np.int64)
        keys[index] = grams
        if n <= 4:
            top = np.maximum.reduceat(counts, starts)
            gram_chars = np.zeros(total, np.int64)
            gram_chars[index] = csum[index + n] - csum[index]
            best_chars = np.maximum.reduceat(
                np.where(counts == top[doc_of], gram_chars, 0), starts)
            share = np.where(top >= 2, top * best_chars / np.maximum(word_chars, 1), 0.0)
            name = f"top_{n}gram_char_share"
        else:
            dup_starts = np.flatnonzero(repeated)
            cover = (np.bincount(dup_starts, minlength=total + 1)
                     - np.bincount(dup_starts + n, minlength=total + 1))
            covered = np.cumsum(cover[:total]) > 0
            share = np.add.reduceat(np.where(covered, lengths, 0), starts) / np.maximum(word_chars, 1)
            name = f"duplicate_{n}gram_char_share"
        for i, value in zip(sel, share.tolist()):
            doc = out[i]
            if doc[name] is not None:
                doc[name] = value
    return out


_NGRAM_NAMES = [(n, f"top_{n}gram_char_share" if n <= 4 else f"duplicate_{n}gram_char_share")
                for n in range(2, 11)]


def _dense(values: np.ndarray) -> np.ndarray:
    """Dense ids (0..k-1, by first occurrence) of int64 ``values``."""
    return pc.dictionary_encode(pa.array(values)).indices.to_numpy(
        zero_copy_only=False).astype(np.int64)
