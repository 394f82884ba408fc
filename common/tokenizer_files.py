"""Tokenizer files other than our own ``tokenizer.json``: which kind a file
is, and the pre-tokenizer regex a tiktoken vocabulary needs.

Shared by the tokenize stage (its ``preflight`` checks the reference
tokenizers the config names) and ``pipeline.tokenizer_report`` (which
measures them); no third-party import.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Pre-tokenizer regexes of tiktoken vocabularies, by preset name. A tiktoken
#: BPE file holds only ``base64(token) rank`` lines; the regex that splits text
#: before BPE is part of the model and must match it, or the counts are wrong.
#: ``qwen``: Qwen (1.x) ``PAT_STR``, QwenLM/Qwen ``tokenization_qwen.py``, the
#: same string in the ``dashscope`` wheel (``dashscope/tokenizers/qwen_tokenizer.py``)
#: that ships ``qwen.tiktoken``. ``cl100k_base``: OpenAI's, tiktoken
#: ``tiktoken_ext/openai_public.py``.
TIKTOKEN_PATTERNS = {
    "qwen": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
}


def tokenizer_kind(path: Path) -> str:
    """``"tekken"`` (Mistral's ``tekken.json``: ``config.pattern`` and a
    ``vocab`` list of base64 ``token_bytes``), ``"tiktoken"`` (lines
    ``<base64 token> <rank>``, e.g. Qwen's ``qwen.tiktoken``) or ``"hf"`` (a
    ``tokenizers`` ``tokenizer.json``), from the file's first bytes."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        if (b'"vocab"' in head and b'"token_bytes"' in head) or (b'"pattern"' in head and b'"config"' in head):
            return "tekken"
        return "hf"
    first = head.splitlines()[0] if head else b""
    if re.fullmatch(rb"[A-Za-z0-9+/=]+ \d+", first.strip()):
        return "tiktoken"
    return "hf"


def resolve_pattern(path: Path, pattern: str | None) -> str:
    """The pre-tokenizer regex for a tiktoken file: ``pattern`` as a preset
    name of :data:`TIKTOKEN_PATTERNS` or a regex; None: the preset named by the
    file's stem (``qwen.tiktoken`` -> ``qwen``).

    Raises:
        ValueError: None and the stem names no preset.
    """
    if pattern is None:
        stem = Path(path).name.split(".")[0]
        if stem not in TIKTOKEN_PATTERNS:
            raise ValueError(f"{path}: a tiktoken file needs its pre-tokenizer pattern (a preset: "
                             f"{', '.join(TIKTOKEN_PATTERNS)}; or the regex)")
        return TIKTOKEN_PATTERNS[stem]
    return TIKTOKEN_PATTERNS.get(pattern, pattern)
