"""Masking of what a private DataElf run lets out: tables, chat records and files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq


def mask_value(value: Any, mask: Callable[[str], str]) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string masked."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {k: mask_value(v, mask) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v, mask) for v in value]
    return value


def mask_columns(table: pa.Table, mask: Callable[[str], str]) -> pa.Table:
    """``table`` with its string columns masked."""
    for i, column in enumerate(table.schema):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            masked = pa.array(
                [mask_value(v, mask) for v in table.column(i).to_pylist()], column.type
            )
            table = table.set_column(i, column, masked)
    return table


def mask_file(path: Path, format: str, mask: Callable[[str], str]) -> None:
    """Mask an exported file in place (``chat_jsonl``, ``parquet`` or ``csv``); a file that
    is not what its format says raises ValueError."""
    if format == "parquet":
        pq.write_table(mask_columns(pq.read_table(path), mask), path)
    elif format == "csv":
        pcsv.write_csv(mask_columns(pcsv.read_csv(path), mask), path)
    else:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        path.write_text(
            "".join(
                json.dumps(mask_value(r, mask), ensure_ascii=False, sort_keys=True) + "\n"
                for r in records
            ),
            encoding="utf-8",
        )
