"""Stage ``script_normalize``: Traditional <-> Simplified Chinese conversion
with OpenCC (off by default). See docs/stages/script_normalize.md.

Chinese documents (``langid_lang == "zh"``) whose script is the one to
convert from are rewritten by OpenCC, character by character by default
(only OpenCC's character dictionaries, ``TSCharacters`` / ``STCharacters``)
or with OpenCC's phrase dictionaries on request (``level: phrase``). Every
other document passes through unchanged. The stage never drops a document.
"""

from __future__ import annotations

import difflib
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stages.base import Column, Stage, StageConfig, with_decision
from stages.zh_script import document_script, opencc_config, opencc_converter

# What each direction converts from: the document scripts (document_script)
# that hold characters of the source script.
_CONVERTS = {"t2s": ("Hant", "mixed"), "s2t": ("Hans", "mixed")}


class Config(StageConfig):
    """The ``script_normalize`` config section.

    Attributes:
        enabled: off by default (``false``): converting changes the text a
            model learns from, so a build asks for it. Our choice; data-juicer
            likewise offers the conversion as an opt-in operator.
        direction: ``t2s`` (Traditional -> Simplified; converts documents
            holding Traditional-only characters: ``Hant`` and ``mixed``) or
            ``s2t`` (the reverse; ``Hans`` and ``mixed``).
        level: ``char`` (default): OpenCC's character dictionaries only, each
            character to its first candidate on its own (one character in,
            one out; 頭髮 -> 头发, but 乾隆 -> 干隆 and s2t 头发 -> 頭發, where
            a character's form depends on the word). ``phrase``: OpenCC's
            shipped configs with their phrase dictionaries (乾隆 stays, 头发
            -> 頭髮; with ``region: tw`` also regional vocabulary, 文件 <->
            檔案, 程序 <-> 程式). Character-level is the default because it
            changes only the script, never the words (our choice, from the
            issue that found phrase-level folding rewriting 文件 -> 文档).
        region: ``none`` (OpenCC standard forms, configs ``t2s``/``s2t``),
            ``tw`` (Taiwan: character variants ``TWVariants``; phrase level
            ``tw2sp``/``s2twp``) or ``hk`` (Hong Kong: ``HKVariants``; phrase
            level ``hk2s``/``s2hk``, which have no regional phrases).
    """

    requires: ClassVar[dict[str, str]] = {"langid_lang": "only Chinese (zh) documents are converted"}

    enabled: bool = False
    direction: Literal["t2s", "s2t"] = "t2s"
    level: Literal["char", "phrase"] = "char"
    region: Literal["none", "tw", "hk"] = "none"


def changed_chars(before: str, after: str) -> int:
    """Code points of ``after`` that differ from ``before``: position by
    position when the lengths are equal (every character-level conversion),
    else line by line, aligning lines of unequal length with
    :class:`difflib.SequenceMatcher` (a phrase such as 使用者 -> 用户
    counts its output characters that are not matched in the input).
    O(len) for equal lengths; O(line length^2) worst case per changed line."""
    if before == after:
        return 0
    if len(before) == len(after):
        a = np.frombuffer(before.encode("utf-32-le"), np.uint32)
        b = np.frombuffer(after.encode("utf-32-le"), np.uint32)
        return int(np.count_nonzero(a != b))
    lines_a, lines_b = before.split("\n"), after.split("\n")
    if len(lines_a) != len(lines_b):  # OpenCC keeps line breaks; compare whole texts then
        lines_a, lines_b = [before], [after]
    total = 0
    for a, b in zip(lines_a, lines_b):
        if a == b:
            continue
        if len(a) == len(b):
            total += sum(x != y for x, y in zip(a, b))
        else:
            matched = sum(block.size for block in
                          difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
            total += len(b) - matched
    return total


class ScriptNormalizeStage(Stage):
    """Adds ``script_normalize_changed`` (int32: characters changed, 0 when
    the document was not converted, null for a non-zh document) and
    ``script_normalize_from`` (string: the script before, ``Hans``, ``Hant``
    or ``mixed`` from :func:`stages.zh_script.document_script`; null for a
    non-zh document or one without a telling character) and rewrites
    ``text`` and ``chars`` of each converted document. Never drops.

    Note ``langid_script`` (stage ``langid``, earlier) keeps the script the
    document had before conversion. Cost: one regex pass over each zh
    document, OpenCC (~5 M characters/s per core) over converted ones;
    memory O(one batch).
    """

    name = "script_normalize"
    order = 150
    Config = Config
    row_independent = True
    columns = {
        "script_normalize_changed": Column("int32", "characters changed by the conversion (0: not converted; "
                                                    "null: not zh)", lineage=True),
        "script_normalize_from": Column("string", "script before conversion: Hans, Hant or mixed "
                                                  "(null: not zh, or no telling character)", lineage=True),
    }
    tally_columns: ClassVar[tuple[str, ...]] = ("script_normalize_changed", "script_normalize_from")

    @classmethod
    def effective_settings(cls, config: Config) -> dict[str, Any]:
        """The OpenCC config applied (a shipped config's name, or the
        character dictionaries of the chain) and OpenCC's version."""
        import opencc

        applied = opencc_config(config.direction, config.level, config.region)
        if isinstance(applied, dict):
            applied = {"characters_only": [step["dict"]["file"].rsplit("/", 1)[-1]
                                           for step in applied["conversion_chain"]]}
        return {"opencc": applied, "opencc_version": opencc.__version__}

    @classmethod
    def tally(cls, table: pa.Table) -> dict[str, int]:
        """``documents_converted`` (changed > 0), ``characters_changed``
        (their sum), and ``from/<script>`` (zh documents by script before:
        ``Hans``, ``Hant``, ``mixed``, ``none``)."""
        changed = table["script_normalize_changed"]
        out = {"documents_converted": int(pc.sum(pc.greater(changed, 0)).as_py() or 0),
               "characters_changed": int(pc.sum(changed).as_py() or 0)}
        scripts = pc.fill_null(pc.filter(table["script_normalize_from"], pc.is_valid(changed)), "none")
        counts = pc.value_counts(scripts)
        for value, count in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):
            out[f"from/{value}"] = int(count)
        return out

    def process(self, table: pa.Table) -> pa.Table:
        """Convert the zh documents of ``table`` (n rows) whose script is
        the direction's source; the others pass unchanged."""
        config: Config = self.config
        converter = opencc_converter(config.direction, config.level, config.region)
        convert_from = _CONVERTS[config.direction]
        texts = table["text"].to_pylist()
        langs = table["langid_lang"].to_pylist()
        changed: list[int | None] = []
        scripts: list[str | None] = []
        edited = False
        for i, (text, lang) in enumerate(zip(texts, langs)):
            if lang != "zh":
                changed.append(None)
                scripts.append(None)
                continue
            script = document_script(text or "")
            scripts.append(script)
            n = 0
            if script in convert_from:
                new = converter.convert(text)
                n = changed_chars(text, new)
                if new != text:
                    texts[i] = new
                    edited = True
            changed.append(n)
        if edited:
            table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
            table = table.set_column(table.column_names.index("chars"), "chars",
                                     pc.cast(pc.utf8_length(table["text"]), pa.int64()))
        return with_decision(table, {"script_normalize_changed": pa.array(changed, pa.int32()),
                                     "script_normalize_from": pa.array(scripts, pa.string())},
                             [None] * table.num_rows)
