"""Input checks and trace-file reading shared by the length models (workload/lengths/sampling.py).

Every check raises :class:`specsim.errors.SpecError` naming a dotted scenario field built from the
distribution's ``field_path`` prefix (``workload.response_tokens.median``, ``.components[1].p99``,
``.path``); the cap is named as the sibling field (``workload.max_response_tokens``).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from specsim.errors import SpecError


def sub_field(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def sibling_field(prefix: str, name: str) -> str:
    """A field next to the distribution: ('workload.response_tokens', 'x') -> 'workload.x'."""
    head = prefix.rpartition(".")[0]
    return f"{head}.{name}" if head else name


def cap_field(prefix: str) -> str:
    """The scenario field of the length limit: workload.response_tokens -> workload.max_response_tokens."""
    return sibling_field(prefix, "max_" + prefix.rpartition(".")[2])


def finite_real(value: Any, fld: str, allowed: str = "a finite number") -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if not math.isfinite(out):
        raise SpecError(fld, value, allowed)
    return out


def positive_real(value: Any, fld: str) -> float:
    out = finite_real(value, fld, "a finite number > 0")
    if out <= 0:
        raise SpecError(fld, value, "a finite number > 0")
    return out


def whole_count(value: Any, fld: str, minimum: int = 0) -> int:
    allowed = f"an integer >= {minimum}"
    if isinstance(value, bool):
        raise SpecError(fld, value, allowed)
    try:
        out = int(value)
    except (TypeError, ValueError):
        raise SpecError(fld, value, allowed) from None
    if out != value or out < minimum:
        raise SpecError(fld, value, allowed)
    return out


def check_cap(cap_tokens: Any, fld: str) -> int:
    """Max length in tokens: an integer >= 1 (floats with an integral value are accepted)."""
    if isinstance(cap_tokens, bool):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)")
    try:
        c = float(cap_tokens)
    except (TypeError, ValueError):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)") from None
    if not math.isfinite(c) or c < 1 or c != int(c):
        raise SpecError(fld, cap_tokens, "an integer >= 1 (tokens)")
    return int(c)


def positive_array(values: Any, fld: str, where: str | None = None) -> np.ndarray:
    """1-D float array of finite, strictly positive lengths (non-empty)."""
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise SpecError(fld, values, "a sequence of positive lengths in tokens", where) from None
    if arr.size == 0:
        raise SpecError(fld, "<empty>", "a non-empty sequence of positive lengths in tokens", where)
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecError(fld, float(arr[i]), f"positive finite lengths in tokens (entry {i})", where)
    return arr


def scalar_out(arr: np.ndarray, scalar: bool):
    return float(arr) if scalar else arr


# --------------------------------------------------------------------------- file reading


_JSON_SUFFIXES = {".jsonl", ".ndjson", ".json"}
#: the columns read by default, first present wins: specsim's own (`length`, `response_tokens`), and
#: the per-response length columns of RL trainers' logs -- `response_length` (veRL's per-sample
#: response length, aggregated as `response_length/mean` in its metrics; OpenRLHF's experience
#: info), `response_lengths`, `generation_lengths` / `generation_length` (NeMo-RL's generation
#: output, per sample or as a list per row); docs/own-setup.md, "Length logs"
LENGTH_COLUMNS = ("length", "response_tokens", "response_length", "response_lengths", "generation_lengths",
                  "generation_length")
_NAMES = LENGTH_COLUMNS
#: suffixes of per-step aggregates (veRL's `response_length/mean`, ...): not one response's length
_AGGREGATES = ("/mean", "/max", "/min", "/std", "/clip_ratio", "_mean", "_max", "_min", "_std")


def _check_column(column: str, fld: str, where: str) -> None:
    if column.lower().endswith(_AGGREGATES):
        raise SpecError(fld.rpartition(".")[0] + ".column" if "." in fld else "column", column,
                        "a column of per-response lengths, not a per-step aggregate (mean/max/min): export one "
                        "row per response", where)


def read_lengths_file(path: Path, fld: str, column: str | None = None) -> list[float]:
    """Response lengths (tokens) from a CSV or JSONL file: column `column` (case-insensitive), or the
    first of LENGTH_COLUMNS present, or a single bare column. A JSON list value is one length per
    entry (NeMo-RL's per-step `generation_lengths`)."""
    where = str(path)
    names = _NAMES if column is None else (column.lower(),)
    wanted = "'" + "', '".join(names) + "'"
    if column is not None:
        _check_column(column, fld, where)
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(fld, where, f"a readable trace file ({e.strerror or e})", where) from None
    raw: list[tuple[int, Any]] = []  # (line number, raw value)
    if path.suffix.lower() in _JSON_SUFFIXES:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise SpecError(fld, line.strip()[:80], f"one JSON object per line (line {lineno})", where) from None
            if isinstance(obj, dict):
                lowered = {str(k).lower(): k for k in obj}
                key = next((lowered[k] for k in names if k in lowered), None)
                if key is None:
                    raise SpecError(fld, sorted(obj)[:10], f"an object with key {wanted} (line {lineno}; "
                                                           "`column:` names another)", where)
                value = obj[key]
                if isinstance(value, list):
                    raw.extend((lineno, v) for v in value)
                else:
                    raw.append((lineno, value))
            else:
                raw.append((lineno, obj))
    else:
        rows = [(i, r) for i, r in enumerate(csv.reader(text.splitlines()), start=1) if any(c.strip() for c in r)]
        if rows:
            first = rows[0][1]
            try:
                [float(c) for c in first]
                header = None
            except ValueError:
                header = [c.strip().lower() for c in first]
            if header is None:
                if len(first) != 1 or column is not None:
                    raise SpecError(fld, first, f"a CSV with a single column, or a header with a {wanted} column",
                                    where)
                col, data = 0, rows
            else:
                col = next((header.index(k) for k in names if k in header), None)
                if col is None:
                    if len(header) != 1 or column is not None:
                        raise SpecError(fld, first, f"a CSV header with a {wanted} column", where)
                    col = 0
                data = rows[1:]
            for lineno, r in data:
                if col >= len(r):
                    raise SpecError(fld, r, f"a value in column {col + 1} (line {lineno})", where)
                raw.append((lineno, r[col].strip()))
    if not raw:
        raise SpecError(fld, where, "a non-empty trace of response lengths", where)
    values: list[float] = []
    for lineno, v in raw:
        if isinstance(v, bool):
            x = float("nan")
        else:
            try:
                x = float(v)
            except (TypeError, ValueError):
                x = float("nan")
        if not math.isfinite(x) or x <= 0:
            raise SpecError(fld, v, f"a positive length in tokens (line {lineno})", where)
        values.append(x)
    return values
