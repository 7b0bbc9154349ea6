"""Trace formats, readers and writers: what calibration (`specsim calibrate`) consumes.

Four kinds of trace, each a CSV (header row, one record per row) or JSONL (one JSON object per
line, same keys). A block of `#` comment lines may precede the data; `# key: value` lines there
are kept as metadata (``df.attrs["meta"]``), and ``# kind: kernel`` names the kind explicitly.
Full-line `#` comments later in the file are skipped. calibration/README.md documents every
column with units and an example.

* kernel  -- measured forward-pass times of fixed batch shapes (GPU micro-benchmarks; what
  calibration/collect/collect.py writes). One row per (op, layout, batch, q, context).
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
target folder + ``os.replace``), CSV unless the path ends in ``.jsonl``/``.ndjson``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim.errors import SpecError
from specsim.hardware import DTYPE_BYTES
from specsim.model import drafter_kind_names

__all__ = [
    "FORMATS",
    "KINDS",
    "Column",
    "atomic_write_text",
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

FILE_FIELD = "(file)"
KERNEL_OPS = ("decode", "verify", "prefill", "draft")
DRAFTER_KINDS = drafter_kind_names()  # the registry, catalog/drafters.yaml
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
_KIND_ALIASES = {
    "kernel": "kernel",
    "engine": "engine",
    "lengths": "lengths",
    "length": "lengths",
    "stage": "stage",
    "stages": "stage",
}


@dataclass(frozen=True)
class Column:
    """One column of a trace format.

    kind: int | float | str | bool | choice. `minimum` with `exclusive` bounds numbers;
    `default` fills an optional column that is absent from the file (None: left out).
    `aliases`: other accepted header names, renamed to `name` on read.
    """

    name: str
    kind: str
    required: bool = True
    minimum: float | None = None
    exclusive: bool = False
    choices: tuple = ()
    default: Any = None
    aliases: tuple = ()
    unit: str = ""
    doc: str = ""

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"one of {list(self.choices)}"
        if self.kind == "bool":
            return "a boolean (true/false/1/0)"
        if self.kind == "str":
            return "a non-empty text value"
        what = "a whole number" if self.kind == "int" else "a finite number"
        if self.minimum is not None:
            what += f" {'>' if self.exclusive else '>='} {self.minimum:g}"
        if self.unit:
            what += f" ({self.unit})"
        return what


FORMATS: dict[str, tuple[Column, ...]] = {
    "kernel": (
        Column(
            "op",
            "choice",
            choices=KERNEL_OPS,
            doc="which pass: decode (q=1), verify (q=k+1), prefill (q=prompt), draft (one drafter pass, q=1)",
        ),
        Column("model", "str", doc="catalog name of the (target) model, e.g. Qwen3-8B"),
        Column("tp", "int", minimum=1, doc="tensor-parallel degree"),
        Column("ep", "int", required=False, minimum=1, default=1, doc="expert-parallel degree (default 1)"),
        Column("pp", "int", required=False, minimum=1, default=1, doc="pipeline stages (default 1)"),
        Column("batch", "int", minimum=1, unit="sequences", doc="sequences in the pass"),
        Column("q_per_seq", "int", minimum=1, unit="tokens", doc="new tokens per sequence"),
        Column("ctx_per_seq", "float", minimum=0, unit="tokens", doc="cached tokens per sequence before the pass"),
        Column("time_s", "float", minimum=0, exclusive=True, unit="s", doc="measured forward-pass time"),
        Column("weight_dtype", "choice", required=False, choices=tuple(DTYPE_BYTES), doc="weight dtype (default bf16)"),
        Column("kv_dtype", "choice", required=False, choices=tuple(DTYPE_BYTES), doc="KV-cache dtype (default bf16)"),
        Column(
            "drafter", "choice", required=False, choices=DRAFTER_KINDS, doc="op=draft: drafter kind (default eagle3)"
        ),
        Column("hardware", "str", required=False, doc="hardware profile name, e.g. h200_sxm"),
        Column("machine", "str", required=False, doc="free text: GPU name, driver, torch version"),
    ),
    "engine": (
        Column("time_s", "float", minimum=0, unit="s", doc="wall time at the end of the step"),
        Column("step_s", "float", minimum=0, exclusive=True, unit="s", doc="duration of the step"),
        Column("active_batch", "int", minimum=1, unit="sequences", doc="running sequences in the step"),
        Column("total_context_tokens", "float", minimum=0, unit="tokens", doc="sum of cached tokens over the batch"),
        Column("k", "int", minimum=0, doc="draft length used (0 = no speculation)"),
        Column("tokens_emitted", "int", minimum=0, unit="tokens", doc="tokens emitted over the batch this step"),
        Column(
            "accepted_tokens",
            "int",
            minimum=0,
            unit="tokens",
            doc="draft tokens accepted over the batch (excludes the bonus token)",
        ),
        Column("model", "str", required=False, doc="catalog model name"),
        Column("tp", "int", required=False, minimum=1, doc="tensor-parallel degree (default 1)"),
        Column("drafter", "choice", required=False, choices=DRAFTER_KINDS, doc="drafter kind for k>0 steps"),
        Column("rl_step", "int", required=False, minimum=0, doc="RL step (policy version) the rollout belongs to"),
    ),
    "lengths": (
        Column("length", "int", minimum=1, aliases=("response_tokens",), unit="tokens", doc="response length"),
        Column("prompt_id", "str", required=False, doc="prompt (GRPO group) identifier"),
        Column("rl_step", "int", required=False, minimum=0, doc="RL step"),
    ),
    "stage": (
        Column("rl_step", "int", minimum=0, doc="RL step"),
        Column("generation_s", "float", minimum=0, unit="s", doc="rollout generation time"),
        Column("reward_s", "float", minimum=0, unit="s", doc="reward computation time"),
        Column("logprob_s", "float", minimum=0, unit="s", doc="policy + reference logprob time"),
        Column("train_s", "float", minimum=0, unit="s", doc="training (fwd+bwd+optimizer) time"),
        Column("weight_sync_s", "float", minimum=0, unit="s", doc="weight sync to the rollout engines"),
        Column("step_s", "float", required=False, minimum=0, unit="s", doc="whole step time"),
        Column("sd", "bool", required=False, doc="speculative decoding on in this step"),
        Column("tau", "float", required=False, minimum=1, doc="mean acceptance length (tokens per verify)"),
    ),
}
KINDS = tuple(FORMATS)


# --------------------------------------------------------------------------- low-level parsing


def _err(field: str, value, allowed: str, where) -> SpecError:
    return SpecError(field, value, allowed, str(where) if where is not None else None)


def _short(v, n: int = 60):
    if isinstance(v, str) and len(v) > n:
        return v[:n] + "..."
    return v


def _load_text(path: Path) -> str:
    where = str(path)
    if not path.exists():
        raise _err(FILE_FIELD, where, "an existing trace file", where)
    if not path.is_file():
        raise _err(FILE_FIELD, where, "a regular file (CSV or JSONL trace)", where)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _err(FILE_FIELD, where, f"a readable file ({exc.strerror or exc})", where) from None
    if not data.strip():
        raise _err(FILE_FIELD, "empty file", "a trace with a header row and at least one record", where)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _err(
            FILE_FIELD,
            data[exc.start : exc.start + 8],
            f"UTF-8 text (CSV or JSONL); the byte at offset {exc.start} is not",
            where,
        ) from None
    if "\x00" in text:
        raise _err(FILE_FIELD, "binary data (NUL bytes)", "UTF-8 text (CSV or JSONL)", where)
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


def _parse_records(path: Path, text: str, kind_hint: str | None):
    """-> (meta, format, columns, records[(label, {col: raw})])."""
    where = str(path)
    meta, content = _split(text)
    if not content:
        raise _err(FILE_FIELD, "no records", "a trace with a header row and at least one record", where)
    first = content[0][1].lstrip()
    is_jsonl = path.suffix.lower() in _JSONL_SUFFIXES or (path.suffix.lower() != ".csv" and first.startswith("{"))
    records: list[tuple[str, dict]] = []
    if is_jsonl:
        columns: list[str] = []
        for lineno, line in content:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _err(
                    FILE_FIELD, _short(line.strip()), f"one JSON object per line (line {lineno}: {exc.msg})", where
                ) from None
            if not isinstance(obj, dict):
                raise _err(FILE_FIELD, _short(line.strip()), f"one JSON object per line (line {lineno})", where)
            obj = {str(k).strip().lower(): v for k, v in obj.items()}
            for key in obj:
                if key not in columns:
                    columns.append(key)
            records.append((f"line {lineno}", obj))
        return meta, "jsonl", columns, records
    try:
        rows = [(lineno, next(csv.reader([line], skipinitialspace=True))) for lineno, line in content]
    except csv.Error as exc:
        raise _err(FILE_FIELD, "CSV", f"valid comma-separated values ({exc})", where) from None
    header_lineno, header = rows[0]
    header = [h.strip().lower() for h in header]
    data_rows = rows[1:]
    # a header-less single column of numbers is a lengths trace
    if len(header) == 1 and _is_number(header[0]) and kind_hint in (None, "lengths"):
        header = ["length"]
        data_rows = rows
        meta.setdefault("kind", "lengths")
    if any(not h for h in header):
        raise _err(FILE_FIELD, rows[0][1], f"a header row of column names without blanks (line {header_lineno})", where)
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise _err(dup[0], "duplicate column", f"each column once in the header (line {header_lineno})", where)
    if not data_rows:
        raise _err(FILE_FIELD, "header only", "a trace with at least one record after the header", where)
    for lineno, r in data_rows:
        if len(r) != len(header):
            raise _err(
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


def _missing(v) -> bool:
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
    bad = lambda: _err(col.name, _short(raw), f"{col.allowed()} ({label})", where)
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
            if x != math.floor(x):
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


def _build_frame(kind: str, columns: list[str], records: list[tuple[str, dict]], where) -> pd.DataFrame:
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
            raise _err(
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
            if _missing(raw):
                if col.required:
                    raise _err(col.name, "" if raw is None else raw, f"{col.allowed()} ({label}: value missing)", where)
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
            out[name] = pd.Series([np.nan if _missing(v) else float(v) for v in raw], dtype="float64")
        except (TypeError, ValueError):
            out[name] = pd.Series([None if _missing(v) else str(v) for v in raw], dtype=object)
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
            raise _err(col, v.item() if hasattr(v, "item") else v, f"{allowed} ({labels[i]})", where)

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


def _resolve_kind(kind: str, where) -> str:
    k = _KIND_ALIASES.get(str(kind).strip().lower())
    if k is None:
        raise _err("kind", kind, f"one of {list(KINDS)}", where)
    return k


def _kind_from_columns(columns: Iterable[str]) -> str | None:
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


def _read(path, kind: str | None) -> pd.DataFrame:
    p = Path(path)
    where = str(path)
    text = _load_text(p)
    meta, fmt, columns, records = _parse_records(p, text, kind)
    declared = meta.get("kind")
    if declared is not None:
        declared = _resolve_kind(declared.split()[0] if declared.split() else declared, where)
    if kind is None:
        kind = declared or _kind_from_columns(columns)
        if kind is None:
            raise _err(
                FILE_FIELD,
                columns,
                "the columns of a kernel, engine, lengths or stage trace "
                "(see calibration/README.md), or a '# kind: <kind>' first line",
                where,
            )
    elif declared is not None and declared != kind:
        raise _err("kind", declared, f"'{kind}' (the file declares '# kind: {declared}')", where)
    df = _build_frame(kind, columns, records, where)
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
    kind = _resolve_kind(kind, where)
    if not isinstance(df, pd.DataFrame) or df.empty:
        raise _err(
            FILE_FIELD,
            "empty" if isinstance(df, pd.DataFrame) else type(df).__name__,
            f"a non-empty pandas DataFrame of {kind} records",
            where,
        )
    columns = [str(c).strip().lower() for c in df.columns]
    frame = df.copy()
    frame.columns = columns
    records = [(f"row {i + 1}", rec) for i, rec in enumerate(frame.to_dict("records"))]
    out = _build_frame(kind, columns, records, where)
    out.attrs.update({"kind": kind, "meta": dict(df.attrs.get("meta", {}) or {})})
    return out


def atomic_write_text(path, text: str) -> Path:
    """Write `text` to `path` atomically: a temp file in the same folder, fsync, os.replace."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(p.parent), prefix=f".{p.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def _cell(v) -> str:
    if v is None or (not isinstance(v, str) and _missing(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _json_value(v):
    if v is None or (not isinstance(v, str) and _missing(v)):
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
    if p.suffix.lower() in _JSONL_SUFFIXES:
        for rec in frame[order].to_dict("records"):
            buf.write(json.dumps({k: _json_value(v) for k, v in rec.items()}) + "\n")
    else:
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(order)
        for row in frame[order].itertuples(index=False, name=None):
            w.writerow([_cell(v) for v in row])
    return atomic_write_text(p, buf.getvalue())


def write_kernel_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "kernel", meta)


def write_engine_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "engine", meta)


def write_length_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "lengths", meta)


def write_stage_trace(df: pd.DataFrame, path, meta: dict | None = None) -> Path:
    return write_trace(df, path, "stage", meta)
