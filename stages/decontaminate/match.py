"""Matching one document against the index, and cutting what matched.

For each gram length the index holds, the document's grams are looked up
(``np.searchsorted`` in the sorted keys); every posting of a found gram is a
triple (document unit j, item g, item unit p). Per item, the triples are
split into *clusters* of document positions no more than
``2 * gram length`` units apart (one changed word breaks the grams that hold
it, a gap of n + 1 positions; two quotes of an item far apart are two
clusters). A cluster is a hit by the first of three rules it passes (its
``rule``):

* ``item_coverage``: the item units its grams cover reach ``min_coverage``
  of the item's coverable units;
* ``field_coverage``: they reach ``min_coverage`` of one field's coverable
  units, that field having at least ``min_field_units`` of them (a document
  quoting only the question), and the field's matched units being at least
  ``min_field_grams`` grams' worth (``min_field_grams x gram length``) or
  the whole field: one 8-character gram shared with a 20-unit option is
  common text, not a quote;
* ``matched_units``: they cover at least ``min_matched_units`` units,
  whatever the share (a long item whose question alone is quoted).

The hit's span runs from the cluster's first matched unit to its last, in
code points of the document as given.

Cost per document: O(units * number of gram lengths) numpy work plus
O(postings of the distinct grams found + occurrences kept x items per gram):
a gram's postings are expanded once per document, not once per occurrence
(:func:`_thin` keeps at most two occurrences per gram per 2n + 1 units);
no state across documents.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stages.decontaminate.config import Config
from stages.decontaminate.index import Index, _cover_mask
from stages.decontaminate.normalize import gram_hashes, units


@dataclasses.dataclass(frozen=True)
class Hit:
    """One matched quote of an eval item in a document.

    Attributes:
        eval_set, item: the eval set name and the item's id.
        start, end: code points of the document (end exclusive), first to
            last matched unit.
        coverage: the larger of the item's share and the share of each field
            the ``field_coverage`` rule may count, in [0, 1]; below
            ``min_coverage`` when the rule is ``matched_units``.
        unit_start, unit_end: the same span in units (end exclusive).
        matched: item units covered by the matched grams.
        rule: the rule that made it a hit: ``item_coverage``,
            ``field_coverage`` or ``matched_units`` (:data:`RULES`, the
            first that passes in that order).
    """

    eval_set: str
    item: str
    start: int
    end: int
    coverage: float
    unit_start: int
    unit_end: int
    matched: int = 0
    rule: str = "item_coverage"


#: The hit rules in the order they are tried (module docstring).
RULES = ("item_coverage", "field_coverage", "matched_units")


def find_hits(text: str, index: Index, config: Config, lengths: list[int] | None = None,
              doc_units: tuple | None = None) -> list[Hit]:
    """Every hit in ``text``, sorted by (start, eval_set, item).

    Args:
        text: the document.
        index: the eval-set index (:class:`~stages.decontaminate.index.Index`).
        config: ``min_coverage``, ``min_field_units``, ``min_field_grams``,
            ``min_matched_units`` and ``min_item_units``.
        lengths: the index's gram lengths (``index.gram_lengths``; pass it
            to skip recomputing per document).
        doc_units: ``units(text)`` when already computed.
    """
    if lengths is None:
        lengths = index.gram_lengths
    h, starts, ends, _ = doc_units if doc_units is not None else units(text)
    if not len(h) or not len(index.keys):
        return []
    found_j, found_k = [], []
    for n in lengths:
        j, k = index.lookup(gram_hashes(h, n))
        if len(j):
            j, k = _thin(j, k, n)
            found_j.append(j)
            found_k.append(k)
    if not found_j:
        return []
    j = np.concatenate(found_j)
    k = np.concatenate(found_k)
    # The postings of each distinct key found, once, grouped by (key, item):
    # a "pair" is one key in one item, its postings a contiguous run.
    keys, occ_key = np.unique(k, return_inverse=True)
    counts = index.offsets[keys + 1] - index.offsets[keys]
    post = _ranges(index.offsets[keys], counts)
    post_key = np.repeat(np.arange(len(keys)), counts)
    post_item = index.post_item[post].astype(np.int64)
    order = np.lexsort((post_item, post_key))
    post_key, post_item, post_pos = post_key[order], post_item[order], index.post_pos[post][order]
    new_pair = np.ones(len(post_key), bool)
    new_pair[1:] = (post_key[1:] != post_key[:-1]) | (post_item[1:] != post_item[:-1])
    pair_start = np.flatnonzero(new_pair)
    pair_len = np.diff(np.append(pair_start, len(post_key)))
    pair_key, pair_item = post_key[pair_start], post_item[pair_start]
    key_first = np.searchsorted(pair_key, np.arange(len(keys)))
    key_pairs = np.diff(np.append(key_first, len(pair_key)))
    # Each document occurrence once per item of its key (not per posting: an
    # item repeating a gram 53 times made 53 triples per occurrence).
    per = key_pairs[occ_key]
    pair = _ranges(key_first[occ_key], per)
    doc_pos = np.repeat(j, per)
    item = pair_item[pair]
    order = np.lexsort((pair, doc_pos, item))
    doc_pos, item, pair = doc_pos[order], item[order], pair[order]
    hits: list[Hit] = []
    bounds = np.flatnonzero(np.diff(item)) + 1
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(item)]])):
        g = int(item[lo])
        n = int(index.item_gram[g])
        d, q = doc_pos[lo:hi], pair[lo:hi]
        breaks = np.flatnonzero(np.diff(d) > 2 * n) + 1
        for c_lo, c_hi in zip(np.concatenate([[0], breaks]), np.concatenate([breaks, [len(d)]])):
            used = np.unique(q[c_lo:c_hi])
            got = _coverage(index, g, post_pos[_ranges(pair_start[used], pair_len[used])], config)
            if got is None:
                continue
            u0, u1 = int(d[c_lo]), int(d[c_hi - 1]) + n
            hits.append(Hit(index.set_names[int(index.item_set[g])], index.item_ids[g], int(starts[u0]),
                            int(ends[u1 - 1]), got[0], u0, u1, got[1], got[2]))
    hits.sort(key=lambda x: (x.start, x.eval_set, x.item, x.end))
    return hits


def _ranges(first: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The integers ``first[i] .. first[i] + lengths[i] - 1`` for every i,
    concatenated (int64)."""
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    shift = np.repeat(first - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return (shift + np.arange(total)).astype(np.int64)


def _thin(j: np.ndarray, k: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Of the document positions ``j`` where key ``k`` was found (int64[m]
    each; grams of length ``n``), only the first and last of each key in each
    block of ``2n + 1`` units, without changing any hit.

    A document repeating a gram (``哈哈哈…``, ``0, 0, 0, …``) that an item also
    repeats expanded to (occurrences x postings) triples: 53 M for a 1 M
    character ``哈`` run against an item holding 60 ``哈`` (14 s, 2.6 GB).
    Why nothing changes: a dropped occurrence lies between the kept first
    and last of its block, at most ``2n`` units apart, so no gap of more than
    ``2n`` (a cluster break) appears or disappears, every cluster keeps its
    first and last position, and each key present in a cluster keeps an
    occurrence there (its postings, hence the coverage, are the same).
    O(m log m)."""
    if len(j) < 3:
        return j, k
    order = np.lexsort((j, k))
    j, k = j[order], k[order]
    block = j // (2 * n + 1)
    first = np.ones(len(j), bool)
    first[1:] = (k[1:] != k[:-1]) | (block[1:] != block[:-1])
    last = np.ones(len(j), bool)
    last[:-1] = first[1:]
    keep = first | last
    return j[keep], k[keep]


def _coverage(index: Index, g: int, positions: np.ndarray, config: Config) -> tuple[float, int, str] | None:
    """(the coverage reported, matched units, the rule) of item ``g`` by grams
    at item ``positions``, or None when no rule passes (module docstring):
    the item's share below ``min_coverage``, no field counted by
    ``field_coverage`` at ``min_coverage`` or more, and fewer than
    ``min_matched_units`` units matched. A field counts when it has at least
    ``min_field_units`` coverable units and at least
    ``min(its coverable units, min_field_grams x gram length)`` of them are
    matched."""
    total = int(index.coverable[g])
    if total < config.min_item_units and total < int(index.item_units[g]):
        return None  # templates and common grams left too little of the item to tell
    if total == 0:
        return None
    n = int(index.item_gram[g])
    mask = _cover_mask(int(index.item_units[g]), np.unique(positions), n)
    matched = int(mask.sum())
    item_share = matched / total
    field_share = 0.0
    f0, f1 = int(index.field_ptr[g]), int(index.field_ptr[g + 1])
    fb = index.field_bounds[f0 + g:f1 + g + 1]
    for f in range(f1 - f0):
        cov = int(index.field_coverable[f0 + f])
        if cov >= config.min_field_units:
            got = int(mask[fb[f]:fb[f + 1]].sum())
            if got >= min(cov, config.min_field_grams * n):
                field_share = max(field_share, got / cov)
    if item_share >= config.min_coverage:
        rule = RULES[0]
    elif field_share >= config.min_coverage:
        rule = RULES[1]
    elif matched >= config.min_matched_units:
        rule = RULES[2]
    else:
        return None
    return float(min(1.0, max(item_share, field_share))), matched, rule


def cut_ranges(hits: list[Hit], starts: np.ndarray, ends: np.ndarray, text_length: int,
               margin: int) -> list[tuple[int, int]]:
    """Code-point ranges to remove: each hit's units widened by ``margin``
    units on each side (to the text's start/end when the margin reaches past
    the first/last unit), overlapping ranges merged, sorted.

    Args:
        hits: from :func:`find_hits`.
        starts, ends: the document's unit offsets (``units(text)``).
        text_length: ``len(text)``.
        margin: units (>= 0).
    """
    out: list[list[int]] = []
    n_units = len(starts)
    for hit in sorted(hits, key=lambda x: x.unit_start):
        lo, hi = hit.unit_start - margin, hit.unit_end + margin
        a = 0 if lo < 0 else (int(starts[lo]) if margin else hit.start)
        b = text_length if hi > n_units else (int(ends[hi - 1]) if margin else hit.end)
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def cut(text: str, ranges: list[tuple[int, int]]) -> str:
    """``text`` without the code-point ``ranges`` (sorted, disjoint)."""
    pieces, at = [], 0
    for a, b in ranges:
        pieces.append(text[at:a])
        at = b
    pieces.append(text[at:])
    return "".join(pieces)
