"""The files beside a version's ``tokenizer.json`` that let Hugging Face
``transformers.AutoTokenizer.from_pretrained(version_dir)`` load it.

``tokenizer_config.json`` names the class (``PreTrainedTokenizerFast``: the
``tokenizers`` file as it is), the special tokens and ``model_max_length``
(the version's ``output.seq_length``); ``special_tokens_map.json`` repeats the
special tokens, as transformers writes it with ``save_pretrained``. Both are
written at publish time into the version (hashed in the manifest's
``files``, checked by ``verify``). The special-token policy (in the corpus,
special-token strings in text are text; loading the file as is matches them)
is in docs/stages/tokenize.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def hf_tokenizer_files(tokenizer_path: Path, tokenize_config: Any, seq_length: int) -> dict[str, str]:
    """``{file name: JSON text}`` of :data:`TOKENIZER_CONFIG` and
    :data:`SPECIAL_TOKENS_MAP` for the tokenizer at ``tokenizer_path``.

    Args:
        tokenizer_path: the version's ``tokenizer.json``.
        tokenize_config: the config of the stage that provided the tokenizer;
            its ``eos_token``, ``pad_token``, ``bos_token`` and
            ``num_reserved_tokens`` are used where it has them (a plugin
            stage may not), and a token is named only when the tokenizer
            holds it (a given ``tokenizer_path`` may lack pad or BOS).
        seq_length: ``output.seq_length`` (tokens per sample), written as
            ``model_max_length``.

    Returns:
        Two JSON texts (keys sorted, indent 2, trailing newline):
        deterministic for one tokenizer and config.

    Raises:
        Exception: of ``tokenizers`` when the file cannot be read.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    special: dict[str, Any] = {}
    for role, default in (("bos_token", "<|bos|>"), ("eos_token", "<|endoftext|>"), ("pad_token", "<|pad|>")):
        token = getattr(tokenize_config, role, default)
        if token is not None and tokenizer.token_to_id(token) is not None:
            special[role] = token
    reserved = [f"<|reserved_{i}|>" for i in range(int(getattr(tokenize_config, "num_reserved_tokens", 0) or 0))]
    reserved = [t for t in reserved if tokenizer.token_to_id(t) is not None]
    if reserved:
        special["additional_special_tokens"] = reserved
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": int(seq_length),
              "clean_up_tokenization_spaces": False, **special}

    def dump(obj: dict) -> str:
        return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"

    return {TOKENIZER_CONFIG: dump(config), SPECIAL_TOKENS_MAP: dump(special)}
