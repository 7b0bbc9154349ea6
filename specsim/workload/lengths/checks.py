"""Input checks and trace-file reading shared by the length models (workload/lengths/sampling.py).

Every check raises :class:`specsim.errors.SpecError` naming a dotted scenario field built from the
distribution's ``field_path`` prefix (``workload.response_tokens.median``, ``.components[1].p99``,
``.path``); the cap is named as the sibling field (``workload.max_response_tokens``).
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from specsim import inputs
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
#: suffixes of per-step aggregates (veRL's `response_length/mean`, ...): not one response's length
_AGGREGATES = ("/mean", "/max", "/min", "/std", "/clip_ratio", "_mean", "_max", "_min", "_std")
#: a one-column header: a name (a letter first), so a malformed first value (`12x`, `1,5`) is an
#: error naming line 1, never dropped as if it were a header
_HEADER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_ ./()-]*$")
#: The most lengths one length file may hold (a 10⁷-row file reads in seconds).
MAX_LENGTH_ROWS = 10_000_000


def _check_column(column: str, fld: str, where: str) -> None:
    if column.lower().endswith(_AGGREGATES):
        raise SpecError(fld.rpartition(".")[0] + ".column" if "." in fld else "column", column,
                        "a column of per-response lengths, not a per-step aggregate (mean/max/min): export one "
                        "row per response", where)


def _all_lengths(values: np.ndarray | None) -> bool:
    """True when a fast reader's array is a valid length file's whole content: 1 to
    MAX_LENGTH_ROWS lengths, each a finite whole number > 0 (else the line-by-line reader names
    the first bad line)."""
    return values is not None and 0 < values.size <= MAX_LENGTH_ROWS and bool(
        (np.isfinite(values) & (values > 0) & (values == np.floor(values))).all())


def _json_lengths(records: list[Any], names: tuple[str, ...]) -> np.ndarray | None:
    """The lengths of decoded JSONL records that all have one shape, gathered without a Python
    branch per record: objects with the same keys, the first of `names` among them
    (case-insensitive) holding a number or a list of numbers; or bare numbers or lists of them.
    None for any other file (mixed shapes, a bool, a string): the line-by-line reader then
    answers, and names the line that breaks a rule."""
    first = records[0]
    if isinstance(first, dict):
        keys = first.keys()
        lowered = {str(k).lower(): k for k in first}
        key = next((lowered[k] for k in names if k in lowered), None)
        if key is None or set(map(type, records)) != {dict} or not all(r.keys() == keys for r in records):
            return None
        records = [r[key] for r in records]
    kinds = set(map(type, records))
    if kinds == {list}:
        records = list(itertools.chain.from_iterable(records))
        kinds = set(map(type, records))
    if not records or not kinds <= {int, float}:
        return None
    return np.asarray(records, dtype=float)


def read_lengths_file(path: Path, fld: str, column: str | None = None) -> np.ndarray:
    """The lengths in a CSV or JSONL file, read through the guarded reader (specsim.inputs):
    regular files only, bounded, UTF-8 with a BOM dropped, one record per line, every length a
    whole number of tokens > 0 (a fractional length is an error naming its line, never rounded).
    The lengths are column `column` (case-insensitive), or the first of LENGTH_COLUMNS present, or
    a single bare column; a JSON list value is one length per entry (NeMo-RL's per-step
    `generation_lengths`)."""
    where = str(path)
    names = LENGTH_COLUMNS if column is None else (column.lower(),)
    wanted = "'" + "', '".join(names) + "'"
    if column is not None:
        _check_column(column, fld, where)
    text = inputs.read_text(path, fld, "length file (CSV or JSONL)")
    json_file = path.suffix.lower() in _JSON_SUFFIXES
    if not json_file:
        fast = None
        if column is None:
            head, _, rest = text.partition("\n")
            body = rest if _HEADER_NAME.match(head.strip()) and not inputs.is_number(head.strip()) else text
            fast = inputs.fast_number_column(body)   # one bare column of numbers (after a one-name header): in C
        if fast is None:
            fast = inputs.fast_csv_column(text, names)   # a headered CSV of several columns: in C
        if _all_lengths(fast):
            return fast
    lines = inputs.content_lines(text)
    if not lines:
        raise SpecError(fld, where, "a non-empty file of response lengths", where)
    if len(lines) > MAX_LENGTH_ROWS + 1:
        raise SpecError(fld, f"{len(lines):,} rows", f"a length file of at most {MAX_LENGTH_ROWS:,} lengths "
                        "(resample it, or fit a lognormal/mixture to it)", where)
    label = "a length in tokens"
    if json_file:
        values = inputs.json_lines_values([line for _, line in lines])
        fast = None if values is None else _json_lengths(values, names)
        if _all_lengths(fast):
            return fast
        raw: list[Any] = []
        linenos: list[int] = []
        for lineno, obj in inputs.jsonl_records(lines, fld, where):
            if isinstance(obj, dict):
                lowered = {str(k).lower(): k for k in obj}
                key = next((lowered[k] for k in names if k in lowered), None)
                if key is None:
                    raise SpecError(fld, sorted(obj)[:10], f"an object with key {wanted} (line {lineno}; "
                                                           "`column:` names another)", where)
                obj = obj[key]
            for v in (obj if isinstance(obj, list) else [obj]):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise SpecError(fld, v, f"{label}: a whole number > 0 (line {lineno})", where)
                raw.append(v)
                linenos.append(lineno)
        if len(raw) > MAX_LENGTH_ROWS:
            raise SpecError(fld, f"{len(raw):,} lengths", f"a length file of at most {MAX_LENGTH_ROWS:,} lengths "
                            "(resample it, or fit a lognormal/mixture to it)", where)
        if not raw:
            raise SpecError(fld, where, "a non-empty file of response lengths", where)
        arr = np.asarray(raw, dtype=float)
        bad = ~np.isfinite(arr) | ~(arr > 0) | (arr != np.floor(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SpecError(fld, raw[i], f"{label}: a whole number > 0 (line {linenos[i]})", where)
        return arr
    body = "\n".join(line for _, line in lines)
    if '"' not in body and "," not in body and column is None:   # one bare column, parsed in C
        cells = [line.strip() for _, line in lines]
        linenos_all = [n for n, _ in lines]
        if not inputs.is_number(cells[0]) and _HEADER_NAME.match(cells[0]):   # a one-column header: a name
            cells, linenos_all = cells[1:], linenos_all[1:]
            if not cells:
                raise SpecError(fld, where, "a non-empty file of response lengths (it has only a header)", where)
        return inputs.number_column(cells, linenos_all, fld, where, integer=True)
    rows = inputs.csv_records(lines, fld, where, MAX_LENGTH_ROWS)
    first_line, first = rows[0]
    header = None if all(inputs.is_number(c) for c in first) else [c.lower() for c in first]
    if header is None:
        if len(first) != 1 or column is not None:
            raise SpecError(fld, first, f"a CSV with a single column, or a header with a {wanted} column "
                            f"(line {first_line})", where)
        col, data = 0, rows
    else:
        col = next((header.index(k) for k in names if k in header), None)
        if col is None:
            if len(header) != 1 or column is not None:
                raise SpecError(fld, first, f"a CSV header with a {wanted} column (line {first_line})", where)
            col = 0
        data = rows[1:]
    if not data:
        raise SpecError(fld, where, "a non-empty file of response lengths (it has only a header)", where)
    width = len(first)
    for lineno, r in data:
        if len(r) != width:
            raise SpecError(fld, r, f"{width} comma-separated value{'s' if width > 1 else ''} per row, like the "
                            f"first row (line {lineno})", where)
    return inputs.number_column([r[col] for _, r in data], [n for n, _ in data], fld, where, integer=True)
