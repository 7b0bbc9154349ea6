"""Low-level trace parsing: text, CSV/JSONL records, cell conversion, typed frames, row checks."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim import inputs
from specsim.calibrate.traces.schema import (
    FILE_FIELD,
    FORMATS,
    INT_MAX,
    JSONL_SUFFIXES,
    KIND_ALIASES,
    KINDS,
    Column,
    short_repr,
    trace_error,
)


def load_text(path: Path) -> str:
    """The trace's text through the guarded reader (specsim.inputs): a regular file, bounded,
    UTF-8 with a BOM dropped, no NUL bytes."""
    where = str(path)
    text = inputs.read_text(path, FILE_FIELD, "trace file (CSV or JSONL)")
    if not text.strip():
        raise trace_error(FILE_FIELD, "empty file", "a trace with a header row and at least one record", where)
    return text


def _split(text: str) -> tuple[dict, list[tuple[int, str]]]:
    """Leading `#` metadata block -> dict; remaining non-blank, non-comment lines with numbers."""
    meta: dict[str, str] = {}
    content: list[tuple[int, str]] = []
    in_header = True
    for lineno, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if in_header:
                body = s.lstrip("#").strip()
                if ":" in body:
                    key, _, value = body.partition(":")
                    key = key.strip().lower()
                    if key and " " not in key:
                        meta[key] = (meta[key] + "; " + value.strip()) if key in meta else value.strip()
                        continue
                meta.setdefault("comment", "")
                meta["comment"] = (meta["comment"] + " " + body).strip()
            continue
        in_header = False
        content.append((lineno, line))
    return meta, content


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def parse_records(path: Path, text: str, kind_hint: str | None):
    """-> (meta, format, columns, records[(label, {col: raw})])."""
    where = str(path)
    meta, content = _split(text)
    if not content:
        raise trace_error(FILE_FIELD, "no records", "a trace with a header row and at least one record", where)
    first = content[0][1].lstrip()
    is_jsonl = path.suffix.lower() in JSONL_SUFFIXES or (path.suffix.lower() != ".csv" and first.startswith("{"))
    records: list[tuple[str, dict]] = []
    if is_jsonl:
        columns: list[str] = []
        for lineno, line in content:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise trace_error(
                    FILE_FIELD, short_repr(line.strip()), f"one JSON object per line (line {lineno}: {exc.msg})", where
                ) from None
            if not isinstance(obj, dict):
                raise trace_error(FILE_FIELD, short_repr(line.strip()), f"one JSON object per line (line {lineno})", where)
            obj = {str(k).strip().lower(): v for k, v in obj.items()}
            for key in obj:
                if key not in columns:
                    columns.append(key)
            records.append((f"line {lineno}", obj))
        return meta, "jsonl", columns, records
    rows = inputs.csv_records(content, FILE_FIELD, where)
    header_lineno, header = rows[0]
    header = [h.strip().lower() for h in header]
    data_rows = rows[1:]
    # a header-less single column of numbers is a lengths trace
    if len(header) == 1 and _is_number(header[0]) and kind_hint in (None, "lengths"):
        header = ["length"]
        data_rows = rows
        meta.setdefault("kind", "lengths")
    if any(not h for h in header):
        raise trace_error(FILE_FIELD, rows[0][1], f"a header row of column names without blanks (line {header_lineno})", where)
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise trace_error(dup[0], "duplicate column", f"each column once in the header (line {header_lineno})", where)
    if not data_rows:
        raise trace_error(FILE_FIELD, "header only", "a trace with at least one record after the header", where)
    for lineno, r in data_rows:
        if len(r) != len(header):
            raise trace_error(
                FILE_FIELD,
                f"line {lineno}: {len(r)} fields",
                f"{len(header)} comma-separated fields per row, as in the header {header}",
                where,
            )
        records.append((f"line {lineno}", dict(zip(header, r))))
    return meta, "csv", header, records


# --------------------------------------------------------------------------- value conversion


_TRUE = {"true", "1", "yes", "y", "t", "on"}
_FALSE = {"false", "0", "no", "n", "f", "off"}


def is_missing(v) -> bool:
    if v is None:
        return True
    if isinstance(v, str):
        return v.strip() == "" or v.strip().lower() in ("na", "nan", "null", "none")
    if isinstance(v, float) and math.isnan(v):
        return True
    try:
        return bool(pd.isna(v)) if np.ndim(v) == 0 else False
    except (TypeError, ValueError):
        return False


def _convert(col: Column, raw, label: str, where):
    """One cell -> python value, or SpecError naming the column, value and line."""
    bad = lambda: trace_error(col.name, short_repr(raw), f"{col.allowed()} ({label})", where)
    if col.kind in ("int", "float"):
        if isinstance(raw, (bool, np.bool_)):
            raise bad()
        try:
            x = float(raw.strip()) if isinstance(raw, str) else float(raw)
        except (TypeError, ValueError):
            raise bad() from None
        if not math.isfinite(x):
            raise bad()
        if col.kind == "int":
            if x != math.floor(x) or abs(x) > INT_MAX:
                raise bad()
            x = int(x)
        if col.minimum is not None and (x <= col.minimum if col.exclusive else x < col.minimum):
            raise bad()
        return x
    if col.kind == "bool":
        if isinstance(raw, (bool, np.bool_)):
            return bool(raw)
        if isinstance(raw, (int, float, np.integer, np.floating)) and raw in (0, 1):
            return bool(raw)
        s = str(raw).strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
        raise bad()
    s = raw.strip() if isinstance(raw, str) else raw
    if not isinstance(s, str):
        if col.kind == "str" and isinstance(s, (int, float, np.integer, np.floating)) and not isinstance(s, bool):
            return str(s)
        raise bad()
    if col.kind == "choice":
        s2 = s.lower()
        if s2 not in col.choices:
            raise bad()
        return s2
    if not s:
        raise bad()
    return s


def build_frame(kind: str, columns: list[str], records: list[tuple[str, dict]], where) -> pd.DataFrame:
    spec = FORMATS[kind]
    present = set(columns)
    rename: dict[str, str] = {}
    for col in spec:
        if col.name not in present:
            alias = next((a for a in col.aliases if a in present), None)
            if alias is not None:
                rename[alias] = col.name
    if rename:
        records = [(label, {rename.get(k, k): v for k, v in rec.items()}) for label, rec in records]
        columns = [rename.get(c, c) for c in columns]
        present = set(columns)
    for col in spec:
        if col.required and col.name not in present:
            names = [col.name, *col.aliases]
            raise trace_error(
                col.name,
                "missing column",
                f"a column of a {kind} trace (header needs {' or '.join(names)}; found {columns})",
                where,
            )
    out: dict[str, Any] = {}
    for col in spec:
        if col.name not in present:
            if col.default is not None:
                out[col.name] = np.full(len(records), col.default, dtype=np.int64 if col.kind == "int" else object)
            continue
        values = []
        gaps = False
        for label, rec in records:
            raw = rec.get(col.name)
            if is_missing(raw):
                if col.required:
                    raise trace_error(col.name, "" if raw is None else raw, f"{col.allowed()} ({label}: value missing)", where)
                if col.default is not None:
                    values.append(col.default)
                    continue
                gaps = True
                values.append(None)
                continue
            values.append(_convert(col, raw, label, where))
        out[col.name] = _series(col, values, gaps)
    # columns outside the format are kept: numbers as float, anything else as text
    known = {c.name for c in spec}
    for name in columns:
        if name in known:
            continue
        raw = [rec.get(name) for _, rec in records]
        try:
            out[name] = pd.Series([np.nan if is_missing(v) else float(v) for v in raw], dtype="float64")
        except (TypeError, ValueError):
            out[name] = pd.Series([None if is_missing(v) else str(v) for v in raw], dtype=object)
    df = pd.DataFrame(out)
    _check_rows(kind, df, [label for label, _ in records], where)
    return df


def _series(col: Column, values: list, gaps: bool) -> pd.Series:
    if col.kind == "int":
        return pd.Series(values, dtype="Int64" if gaps else "int64")
    if col.kind == "float":
        return pd.Series([np.nan if v is None else v for v in values], dtype="float64")
    if col.kind == "bool":
        return pd.Series(values, dtype="boolean" if gaps else bool)
    return pd.Series(values, dtype=object)


def _check_rows(kind: str, df: pd.DataFrame, labels: list[str], where) -> None:
    """Cross-column consistency checks."""

    def first(mask, col, allowed):
        idx = np.flatnonzero(np.asarray(mask, dtype=bool))
        if idx.size:
            i = int(idx[0])
            v = df[col].iloc[i]
            raise trace_error(col, v.item() if hasattr(v, "item") else v, f"{allowed} ({labels[i]})", where)

    if kind == "kernel":
        op, q = df["op"].to_numpy(), df["q_per_seq"].to_numpy()
        first((op == "decode") & (q != 1), "q_per_seq", "1 for op=decode")
        first((op == "draft") & (q != 1), "q_per_seq", "1 for op=draft (one draft token per sequence per pass)")
        first((op == "verify") & (q < 2), "q_per_seq", "k+1 >= 2 for op=verify")
    elif kind == "engine":
        k = df["k"].to_numpy()
        n = df["active_batch"].to_numpy()
        acc = df["accepted_tokens"].to_numpy()
        emit = df["tokens_emitted"].to_numpy()
        first(acc > k * n, "accepted_tokens", "<= k * active_batch (at most k draft tokens accepted per sequence)")
        first(emit > (k + 1) * n, "tokens_emitted", "<= (k+1) * active_batch (at most k accepted + 1 per sequence)")


# --------------------------------------------------------------------------- readers


def resolve_kind(kind: str, where) -> str:
    k = KIND_ALIASES.get(str(kind).strip().lower())
    if k is None:
        raise trace_error("kind", kind, f"one of {list(KINDS)}", where)
    return k


def kind_from_columns(columns: Iterable[str]) -> str | None:
    cols = set(columns)
    if {"op", "q_per_seq"} <= cols or {"op", "ctx_per_seq"} <= cols:
        return "kernel"
    if {"step_s", "tokens_emitted"} <= cols or {"active_batch", "accepted_tokens"} <= cols:
        return "engine"
    if "generation_s" in cols:
        return "stage"
    if "length" in cols or "response_tokens" in cols:
        return "lengths"
    return None
