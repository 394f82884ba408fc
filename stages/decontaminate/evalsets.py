"""Reading eval sets: JSONL (optionally gzip), Parquet, or a Hugging Face
dataset saved with ``save_to_disk``, read with pyarrow alone (the saved files
are Arrow IPC *stream* files listed in ``state.json``; ``datasets`` is never
imported here).

An *item* is one record: its id (the ``id_field`` value as text, or the
0-based row number) and the texts of its ``fields`` in order. Eval sets are
small (GSM8K's test split: 1,319 items; MMLU: 14,042; C-Eval: 13,948), so an
eval set is read whole: O(its size).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from stages.decontaminate.config import EvalSet

HF_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
#: Where a relative eval-set path is looked up: the directory holding
#: ``configs/`` (the repo root), as for the sources' paths.
REPO_ROOT = Path(__file__).resolve().parents[2]


def resolved_path(eval_set: EvalSet) -> Path:
    """``eval_set.path``, relative to :data:`REPO_ROOT` unless absolute."""
    path = Path(eval_set.path).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


class EvalSetError(ValueError):
    """An eval set that cannot be read as configured (one line, naming the file)."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One eval item: ``id`` (text) and ``fields`` (the text of each configured field, in order)."""

    id: str
    fields: tuple[str, ...]


def detect_format(eval_set: EvalSet) -> str:
    """``jsonl``, ``parquet`` or ``hf_disk``: ``eval_set.format`` or from the path.

    Raises:
        EvalSetError: path missing, or a format that cannot be told.
    """
    path = resolved_path(eval_set)
    if not path.exists():
        raise EvalSetError(f"{path}: no such file or directory")
    if eval_set.format is not None:
        return eval_set.format
    if path.is_dir():
        if any((path / m).exists() for m in HF_MARKERS):
            return "hf_disk"
        raise EvalSetError(f"{path}: a directory without {', '.join(HF_MARKERS)} (not a saved HF dataset)")
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".json")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    raise EvalSetError(f"{path}: cannot tell the format from the name; set format: jsonl|parquet|hf_disk")


def files(eval_set: EvalSet) -> list[Path]:
    """The files whose bytes make the eval set (for its digest), sorted: the
    file itself, or every file of the saved dataset directory (the chosen
    split's directory for a ``DatasetDict``)."""
    path = resolved_path(eval_set)
    if path.is_file():
        return [path]
    return sorted(p for p in _hf_split_dir(eval_set).rglob("*") if p.is_file())


def digest(eval_set: EvalSet) -> str:
    """sha256 (hex) over the eval set's files: each relative name and bytes."""
    h = hashlib.sha256()
    root = resolved_path(eval_set)
    for f in files(eval_set):
        h.update(str(f.relative_to(root) if f != root else f.name).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _hf_split_dir(eval_set: EvalSet) -> Path:
    path = resolved_path(eval_set)
    dd = path / "dataset_dict.json"
    if dd.exists():
        splits = json.loads(dd.read_text())["splits"]
        split = eval_set.split
        if split is None:
            if len(splits) != 1:
                raise EvalSetError(f"{path}: a DatasetDict with splits {splits}; set split")
            split = splits[0]
        if split not in splits:
            raise EvalSetError(f"{path}: no split {split!r} (has {splits})")
        return path / split
    return path


def read_table(eval_set: EvalSet) -> pa.Table:
    """The eval set's records as one Arrow table (every column).

    Raises:
        EvalSetError: unreadable file, bad JSON line (with its line number).
    """
    fmt = detect_format(eval_set)
    path = resolved_path(eval_set)
    try:
        if fmt == "parquet":
            return pq.read_table(path)
        if fmt == "hf_disk":
            split_dir = _hf_split_dir(eval_set)
            state = json.loads((split_dir / "state.json").read_text())
            tables = []
            for entry in state["_data_files"]:
                with pa.memory_map(str(split_dir / entry["filename"])) as source:
                    tables.append(pa.ipc.open_stream(source).read_all())
            if not tables:
                raise EvalSetError(f"{split_dir}: state.json lists no data file")
            return pa.concat_tables(tables)
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        rows: list[dict[str, Any]] = []
        with opener(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise EvalSetError(f"{path}:{number}: not UTF-8 (byte {exc.start + 1} of the line)") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise EvalSetError(f"{path}:{number}: not JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(row, dict):
                    kind = {list: "array", str: "string", type(None): "null", bool: "boolean"}.get(type(row), "number")
                    raise EvalSetError(f"{path}:{number}: a JSON {kind}, not an object (one record per line)")
                rows.append(row)
        return _rows_table(rows)
    except (OSError, EOFError, pa.ArrowException, KeyError) as exc:
        raise EvalSetError(f"{path}: cannot read as {fmt} ({exc})") from None


def _rows_table(rows: list[dict[str, Any]]) -> pa.Table:
    """JSON rows as a table of Python objects kept as JSON text per column
    (heterogeneous values stay readable)."""
    names: list[str] = []
    for r in rows:
        for k in r:
            if k not in names:
                names.append(k)
    return pa.table({k: pa.array([_no_lone_surrogates(json.dumps(r[k], ensure_ascii=False)) if k in r else None
                                  for r in rows],
                                 pa.string()) for k in names}).replace_schema_metadata({"json_columns": "1"})


_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (a JSON ``"\\ud800"`` escape without
    its pair, which no UTF-8 string can hold) as U+FFFD; both are separators
    to the index (:mod:`stages.decontaminate.normalize`)."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def _text(value: Any) -> str:
    """A field value as text: list/tuple elements and dict values joined by
    a line break, None as empty, numbers as ``str``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "\n".join(_text(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v) for v in value)
    return str(value)


def _labelled(name: str, value: Any) -> str:
    """A labelled field as text: ``"A. text"``, or a list's elements as
    ``"A. x\nB. y"``."""
    if isinstance(value, (list, tuple)):
        return "\n".join(f"{chr(ord('A') + i)}. {_text(v)}" for i, v in enumerate(value))
    return f"{name}. {_text(value)}"


def read_items(eval_set: EvalSet) -> list[Item]:
    """The eval set's items in file order.

    Raises:
        EvalSetError: a configured field (or ``id_field``) absent from the
            records, or a repeated id.
    """
    table = read_table(eval_set)
    is_json = (table.schema.metadata or {}).get(b"json_columns") == b"1"
    wanted = [*eval_set.fields, *([eval_set.id_field] if eval_set.id_field else [])]
    missing = [f for f in wanted if f not in table.column_names]
    if missing:
        raise EvalSetError(f"{resolved_path(eval_set)}: no field {', '.join(map(repr, missing))} in the records "
                           f"(fields: {', '.join(table.column_names)})")
    columns = {}
    for f in wanted:
        values = table[f].to_pylist()
        columns[f] = [json.loads(v) if (is_json and v is not None) else v for v in values]
    items, seen = [], set()
    for row in range(table.num_rows):
        item_id = str(row) if eval_set.id_field is None else _text(columns[eval_set.id_field][row])
        if item_id in seen:
            raise EvalSetError(f"{resolved_path(eval_set)}: item id {item_id!r} ({eval_set.id_field}) occurs twice")
        seen.add(item_id)
        items.append(Item(item_id, tuple(_labelled(f, columns[f][row]) if f in eval_set.label_fields
                                         else _text(columns[f][row]) for f in eval_set.fields)))
    return items
