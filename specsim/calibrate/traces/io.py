"""Trace formats, readers and writers: what calibration (`specsim calibrate traces`, this folder's hardware_fit.py) consumes.

Four kinds of trace, each a CSV (header row, one record per row) or JSONL (one JSON object per
line, same keys). A block of `#` comment lines may precede the data; `# key: value` lines there
are kept as metadata (``df.attrs["meta"]``), and ``# kind: kernel`` names the kind explicitly.
Full-line `#` comments later in the file are skipped. calibration/README.md documents every
column with units and an example.

* kernel  -- measured forward-pass times of fixed batch shapes (GPU micro-benchmarks; what
  `specsim calibrate collect` writes). One row per (op, layout, batch, q, context).
* engine  -- per engine step, what vLLM / SGLang / NeMo-RL speculative-decoding metrics give.
* lengths -- observed response lengths (tokens).
* stage   -- per RL step, the time of each pipeline stage.

Readers return a pandas DataFrame with validated dtypes (int64 / float64 / object / bool; an
optional column with gaps becomes nullable Int64 / boolean / float NaN / None) and
``df.attrs = {"kind", "path", "format", "meta"}``. Every malformed input (missing file, empty
file, bytes that are not UTF-8, a missing column, a value that is not a number, a negative time,
an unknown op, ...) raises :class:`specsim.errors.SpecError` naming the file (``where``), the
column (``field``; ``"(file)"`` for whole-file problems), the value and what is allowed -- never a
parser traceback. Writers validate the frame the same way and write atomically (temp file in the
target folder + ``os.replace``, via specsim.atomic), CSV unless the path ends in ``.jsonl``/``.ndjson``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.atomic import write_text
from specsim.calibrate.traces.parse import (
    build_frame,
    is_missing,
    kind_from_columns,
    load_text,
    parse_records,
    resolve_kind,
)
from specsim.calibrate.traces.schema import (  # noqa: F401
    DRAFTER_KINDS,
    FILE_FIELD,
    FORMATS,
    INT_MAX,
    JSONL_SUFFIXES,
    KERNEL_OPS,
    KINDS,
    Column,
    short_repr,
    trace_error,
)

__all__ = [
    "FORMATS",
    "KINDS",
    "Column",
    "read_engine_trace",
    "read_kernel_trace",
    "read_length_trace",
    "read_stage_trace",
    "read_trace",
    "sniff_kind",
    "validate_trace",
    "write_engine_trace",
    "write_kernel_trace",
    "write_length_trace",
    "write_stage_trace",
    "write_trace",
]


def _read(path, kind: str | None) -> pd.DataFrame:
    p = Path(path)
    where = str(path)
    text = load_text(p)
    meta, fmt, columns, records = parse_records(p, text, kind)
    declared = meta.get("kind")
    if declared is not None:
        declared = resolve_kind(declared.split()[0] if declared.split() else declared, where)
    if kind is None:
        kind = declared or kind_from_columns(columns)
        if kind is None:
            raise trace_error(
                FILE_FIELD,
                columns,
                "the columns of a kernel, engine, lengths or stage trace "
                "(see calibration/README.md), or a '# kind: <kind>' first line",
                where,
            )
    elif declared is not None and declared != kind:
        raise trace_error("kind", declared, f"'{kind}' (the file declares '# kind: {declared}')", where)
    df = build_frame(kind, columns, records, where)
    meta = dict(meta)
    meta["kind"] = kind
    df.attrs.update({"kind": kind, "path": where, "format": fmt, "meta": meta})
    return df


def read_kernel_trace(path) -> pd.DataFrame:
    """Kernel trace: measured forward-pass times (columns in FORMATS['kernel'])."""
    return _read(path, "kernel")


def read_engine_trace(path) -> pd.DataFrame:
    """Engine trace: one row per engine step (columns in FORMATS['engine'])."""
    return _read(path, "engine")


def read_length_trace(path) -> pd.DataFrame:
    """Lengths trace: response lengths; a `response_tokens` column is renamed to `length`."""
    return _read(path, "lengths")


def read_stage_trace(path) -> pd.DataFrame:
    """Stage trace: per RL step stage times (columns in FORMATS['stage'])."""
    return _read(path, "stage")


def read_trace(path) -> pd.DataFrame:
    """Any trace; the kind comes from a `# kind: ...` header line or is sniffed from the columns.
    The kind is in ``df.attrs["kind"]``."""
    return _read(path, None)


def sniff_kind(path) -> str:
    """The kind `read_trace` would give the file (reads and validates it)."""
    return read_trace(path).attrs["kind"]


# --------------------------------------------------------------------------- writers


def validate_trace(df: pd.DataFrame, kind: str, where: str = "<DataFrame>") -> pd.DataFrame:
    """Validate an in-memory frame as a `kind` trace; returns the normalised frame (dtypes as a reader gives)."""
    kind = resolve_kind(kind, where)
    if not isinstance(df, pd.DataFrame) or df.empty:
        raise trace_error(
            FILE_FIELD,
            "empty" if isinstance(df, pd.DataFrame) else type(df).__name__,
            f"a non-empty pandas DataFrame of {kind} records",
            where,
        )
    columns = [str(c).strip().lower() for c in df.columns]
    frame = df.copy()
    frame.columns = columns
    records = [(f"row {i + 1}", rec) for i, rec in enumerate(frame.to_dict("records"))]
    out = build_frame(kind, columns, records, where)
    out.attrs.update({"kind": kind, "meta": dict(df.attrs.get("meta", {}) or {})})
    return out


def _cell(v) -> str:
    if v is None or (not isinstance(v, str) and is_missing(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _json_value(v):
    if v is None or (not isinstance(v, str) and is_missing(v)):
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v)
    return str(v)


def write_trace(df: pd.DataFrame, path, kind: str, meta: dict | None = None) -> Path:
    """Validate `df` as a `kind` trace and write it atomically (CSV, or JSONL for .jsonl/.ndjson).

    The file starts with `# kind: <kind>` and one `# key: value` line per metadata entry
    (`meta`, else ``df.attrs["meta"]``)."""
    p = Path(path)
    frame = validate_trace(df, kind, where=str(p))
    kind = frame.attrs["kind"]
    meta = dict(df.attrs.get("meta", {}) or {}) if meta is None else dict(meta)
    meta.pop("kind", None)
    order = [c.name for c in FORMATS[kind] if c.name in frame.columns]
    order += [c for c in frame.columns if c not in order]
    lines = [f"# kind: {kind}"]
    for key, value in meta.items():
        key = str(key).strip().lower().replace(" ", "_") or "comment"
        text = " ".join(str(value).split())
        if key == "comment":
            # a bare comment line unless it would read back as a `key: value` pair
            head = text.partition(":")[0].strip()
            lines.append(f"# comment: {text}" if ":" in text and head and " " not in head else f"# {text}")
        else:
            lines.append(f"# {key}: {text}")
    buf = io.StringIO()
    buf.write("\n".join(lines) + "\n")
    if p.suffix.lower() in JSONL_SUFFIXES:
        for rec in frame[order].to_dict("records"):
            buf.write(json.dumps({k: _json_value(v) for k, v in rec.items()}) + "\n")
    else:
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(order)
        for row in frame[order].itertuples(index=False, name=None):
            w.writerow([_cell(v) for v in row])
    return write_text(p, buf.getvalue())


def write_kernel_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "kernel", meta)


def write_engine_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "engine", meta)


def write_length_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "lengths", meta)


def write_stage_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "stage", meta)
