"""Language codes: what a user may write in a config, and what a document is labelled.

Documents are labelled with lid.176's labels (``stages.langid``): ISO 639-1
where one exists (``en``, ``no``, ``ms``, ``id``), otherwise an ISO 639-3
style code (``ceb``, ``nds``), and ``zh`` for every Chinese label
(``zh``, ``yue``, ``wuu`` are merged; the script goes to ``langid_script``).

Users write codes the way their locale or their other tools do: ``nb``
(Norwegian Bokmal, the locale code), ``zh-Hant``, ``zh_TW``, ``cmn``,
``eng``, ``in`` (the withdrawn code of Indonesian), ``pt_BR``.
:func:`canonical` turns any of them into the label a document of that
language gets, so that an allow-list, a preset key or a threshold written
with ``nb`` applies to the text lid.176 labels ``no``. Tag parsing and the
deprecated/ISO 639-3 -> 639-1 mapping are the ``langcodes`` library's
(BCP 47, IANA registry); only the steps that are lid.176's own choices are
listed here (:data:`TO_LABEL`).
"""

from __future__ import annotations

from functools import lru_cache

# Standardized language subtag -> the lid.176 label (after the zh merge) for
# the same text. Sources: lid.176 emits ``no`` for Bokmal text (it has no
# ``nb`` label; it has ``nn`` for Nynorsk), ``tl`` for Tagalog/Filipino
# (langcodes standardizes ``tl`` to ``fil``), ``sh`` for Serbo-Croatian (kept
# as written: langcodes turns it into ``sr-Latn``), ``zh``/``yue``/``wuu``
# merged into ``zh`` by stages.langid; ``zsm`` (Standard Malay) is lid's
# ``ms``.
TO_LABEL = {"nb": "no", "nob": "no", "fil": "tl", "cmn": "zh", "yue": "zh", "wuu": "zh",
            "zsm": "ms", "zho": "zh", "chi": "zh"}
# lid.176 labels that langcodes would rewrite (kept as lid.176 spells them).
_LID_AS_IS = {"sh", "tl", "no", "nn"}


@lru_cache(maxsize=4096)
def canonical(code: str) -> str:
    """The document label that ``code`` stands for.

    ``"nb"``, ``"nob"``, ``"no"`` -> ``"no"``; ``"zh-Hant"``, ``"zh_TW"``,
    ``"cmn"``, ``"yue"``, ``"wuu"`` -> ``"zh"``; ``"eng"`` -> ``"en"``;
    ``"in"`` -> ``"id"``; ``"iw"`` -> ``"he"``; ``"pt_BR"`` -> ``"pt"``;
    ``"fil"`` -> ``"tl"``. A code that is not a language tag (``"code"``,
    a ``lang_hint`` of a source) is returned lowercased and stripped.

    Args:
        code: a language code or BCP 47 tag (``_`` accepted for ``-``).

    Returns:
        str: the lowercase label.

    Raises:
        TypeError: ``code`` is not a str.
    """
    if not isinstance(code, str):
        raise TypeError(f"a language code is a str, got {type(code).__name__}")
    raw = code.strip().replace("_", "-")
    lowered = raw.lower()
    if lowered in _LID_AS_IS:
        return lowered
    if lowered in TO_LABEL:
        return TO_LABEL[lowered]
    try:
        import langcodes

        language = langcodes.Language.get(langcodes.standardize_tag(raw)).language
    except (ValueError, LookupError):
        return lowered
    if not language:
        return lowered
    return TO_LABEL.get(language, language)


def canonical_keys(mapping: dict[str, object], what: str) -> dict[str, object]:
    """``mapping`` with every key through :func:`canonical` (``default``
    kept as is).

    Raises:
        ValueError: two keys stand for one label (``nb`` and ``no``), naming
            ``what`` (the config field).
    """
    out: dict[str, object] = {}
    written: dict[str, str] = {}
    for key, value in mapping.items():
        label = key if key == "default" else canonical(key)
        if label in out:
            raise ValueError(f"{what}: {written[label]!r} and {key!r} both mean language {label!r}")
        out[label] = value
        written[label] = key
    return out
