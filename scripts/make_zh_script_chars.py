"""Generate ``stages/data/zh_script_chars.json``: the characters that tell
Simplified from Traditional Chinese, used by ``stages.zh_script.chinese_script``.

Source: OpenCC's character dictionaries ``STCharacters`` (Simplified -> one
or more Traditional candidates) and ``TSCharacters`` (the reverse), as
shipped in the ``opencc`` wheel (``opencc/clib/share/opencc/*.ocd2``),
dumped to text with the wheel's own ``opencc_dict`` tool.

A character is *Simplified-only* when STCharacters maps it to Traditional
candidates that do not include itself (发 -> 發 髮) and TSCharacters has no
entry for it; *Traditional-only* likewise the other way round (長 -> 长).
Characters valid in both scripts whose first candidate is another character
(于 -> 於 于, 后 -> 後 后, 云 -> 雲 云) are only *weak* evidence, used to break a
tie: a Traditional text of the Shijing is full of 于 and 采, a Simplified
Tang poem may hold only 云 and 里.

    .venv/bin/python scripts/make_zh_script_chars.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from importlib.metadata import version
from pathlib import Path

import opencc

OUT = Path(__file__).resolve().parents[1] / "stages" / "data" / "zh_script_chars.json"


def read_dictionary(name: str) -> dict[str, list[str]]:
    """``key -> candidates`` of one OpenCC ``.ocd2`` dictionary."""
    clib = Path(opencc.__file__).parent / "clib"
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / f"{name}.txt"
        subprocess.run([str(clib / "bin" / "opencc_dict"), "-i", str(clib / "share" / "opencc" / f"{name}.ocd2"),
                        "-o", str(text), "-f", "ocd2", "-t", "text"], check=True, capture_output=True)
        entries = {}
        for line in text.read_text(encoding="utf-8").splitlines():
            key, candidates = line.split("\t")
            entries[key] = candidates.split(" ")
    return entries


def main() -> None:
    st, ts = read_dictionary("STCharacters"), read_dictionary("TSCharacters")
    hans = sorted(c for c, cands in st.items() if len(c) == 1 and c not in cands and c not in ts)
    hant = sorted(c for c, cands in ts.items() if len(c) == 1 and c not in cands and c not in st)
    hans_weak = sorted(c for c, cands in st.items()
                       if len(c) == 1 and cands[0] != c and c in cands and c not in ts)
    hant_weak = sorted(c for c, cands in ts.items()
                       if len(c) == 1 and cands[0] != c and c in cands and c not in st)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "source": f"OpenCC {version('opencc')} STCharacters.ocd2 / TSCharacters.ocd2 "
                  "(scripts/make_zh_script_chars.py)",
        "hans_only": "".join(hans), "hant_only": "".join(hant),
        "hans_weak": "".join(hans_weak), "hant_weak": "".join(hant_weak)}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8")
    print(f"{OUT}: {len(hans)} Simplified-only, {len(hant)} Traditional-only characters; "
          f"weak: {len(hans_weak)} Simplified, {len(hant_weak)} Traditional")


if __name__ == "__main__":
    main()
