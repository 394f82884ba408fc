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
#: The 176 labels of lid.176 (``lid.176.ftz``, read from the model's
#: predictions; ``yue``/``wuu`` are merged into ``zh`` by stages.langid).
LID_LABELS = frozenset("""
af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv cy da
de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht hu hy ia id
ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min mk ml mn
mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm ro ru rue sa
sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec vep vi vls vo wa war
wuu xal xmf yi yo yue zh""".split())
#: The labels a document can get: lid.176's, less the merged Chinese ones.
DOCUMENT_LABELS = LID_LABELS - {"yue", "wuu"}
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


def unknown_codes(codes, declared=()) -> list[str]:
    """The codes of ``codes`` that no document can be labelled with: not a
    lid.176 label after :func:`canonical`, not ``default`` or ``code`` (the
    project's conventional ``lang`` of code sources), and not in ``declared`` (the languages sources declare, e.g. ``code``).

    Args:
        codes: iterable of str.
        declared: codes that sources give their documents (``lang``).

    Returns:
        list[str]: the unknown codes as written, in order, without repeats.
    """
    known = DOCUMENT_LABELS | {"default", "code"} | {canonical(d) for d in declared}
    out = []
    for code in codes:
        if isinstance(code, str) and canonical(code) not in known and code not in out:
            out.append(code)
    return out


def yaml_codes(value):
    """``value`` with YAML 1.1's reading of ``no`` undone: PyYAML reads an
    unquoted ``no`` (Norwegian) as ``False``, so in a list of language codes
    or as a mapping key ``False`` becomes ``"no"`` (and ``True``, from
    ``yes``/``on``, is left for validation to refuse). Other values are
    returned unchanged.
    """
    if isinstance(value, list):
        return ["no" if v is False else v for v in value]
    if isinstance(value, tuple):
        return tuple("no" if v is False else v for v in value)
    if isinstance(value, dict):
        return {("no" if k is False else k): v for k, v in value.items()}
    return value


def canonical_list(value):
    """A config list of language codes as a field validator reads it (mode
    "before"): YAML's ``no`` undone (:func:`yaml_codes`), each code made
    canonical (:func:`canonical`), repeats dropped in first-seen order. A
    value that is not a list is returned for validation to judge."""
    value = yaml_codes(value)
    if isinstance(value, list):
        return list(dict.fromkeys(canonical(v) if isinstance(v, str) else v for v in value))
    return value
