"""The one guarded reader for every input file specsim opens: scenarios, hardware profiles,
catalogs, length files, traces, validation targets, calibration tables and stored results.

Every read goes through :func:`read_bytes`, which

* opens without blocking (``O_NONBLOCK``), so a FIFO or a device never hangs the open, then
  refuses anything that is not a regular file (a folder, a FIFO, a character or block device, a
  socket), naming what it is;
* refuses a file over a size bound (``max_bytes``; :data:`MAX_INPUT_BYTES` unless the caller
  says less) before reading it, and never reads more than the bound plus one byte (``/proc``
  files that report size 0 are bounded too);
* says what the operating system said (``errno`` in words: :func:`specsim.errors.os_reason`).

:func:`read_text` decodes UTF-8 (a byte-order mark is dropped, not read as part of the first
row) and refuses NUL bytes (binary data); :func:`read_yaml` and :func:`read_json` parse with
errors that carry the line. :func:`csv_records` and :func:`jsonl_records` parse strictly, one
record per line, with line numbers: a stray quote, a quoted field running across lines or a row of
the wrong width is an error naming the line, never rows merged into one.
:func:`number_column` reads a single numeric column at C speed (numpy), so a 10⁷-row length file reads in
seconds; longer columns are refused with the bound (:data:`MAX_ROWS`).

Errors are :class:`specsim.errors.SpecError` naming the field the caller gives (the scenario field
that named the file, e.g. ``workload.response_tokens.path``, or ``(file)``), the value, what is
allowed and the file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specsim.errors import MAX_INT, SpecError, YamlTooLarge, load_yaml_text, os_reason, short_repr

__all__ = ["MAX_INPUT_BYTES", "MAX_ROWS", "csv_records", "jsonl_records", "number_column", "read_bytes", "read_json",
           "read_text", "read_yaml"]

#: The largest input file read (bytes). A 10⁷-row length file is about 60 MB.
MAX_INPUT_BYTES = 512 * 2**20
#: YAML files (scenarios, profiles, catalogs, targets) are far smaller.
MAX_YAML_BYTES = 16 * 2**20
#: The most data rows a length file or trace may hold.
MAX_ROWS = 20_000_000

_KINDS = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def file_kind(mode: int) -> str:
    """'a FIFO (named pipe)', 'a folder', ... for a stat mode; 'a regular file' for one."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else
                "a special file")


def read_bytes(path: str | os.PathLike, field: str = "(file)", what: str = "file",
               max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (see the module doc)."""
    where = str(path)
    if not where:
        raise SpecError(field, where, f"the path of an existing {what} (got an empty path)", where or None)
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise SpecError(field, where, f"an existing {what} (no such file)", where) from None
    except IsADirectoryError:
        raise SpecError(field, where, f"a regular {what}, not a folder", where) from None
    except OSError as exc:
        raise SpecError(field, where, f"a readable {what} ({os_reason(exc)})", where) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(field, where, f"a regular {what}; this path is {file_kind(st.st_mode)}", where)
        if st.st_size > max_bytes:
            raise SpecError(field, where, f"a {what} of at most {_mb(max_bytes)} (this one is {_mb(st.st_size)})",
                            where)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 22, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise SpecError(field, where, f"a {what} of at most {_mb(max_bytes)} (it reads on past that)", where)
        return b"".join(chunks)
    except OSError as exc:
        raise SpecError(field, where, f"a readable {what} ({os_reason(exc)})", where) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike, field: str = "(file)", what: str = "file",
              max_bytes: int = MAX_INPUT_BYTES) -> str:
    """A regular file's text: UTF-8, a leading byte-order mark dropped, no NUL bytes."""
    where = str(path)
    data = read_bytes(path, field, what, max_bytes)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(field, data[exc.start: exc.start + 8],
                        f"a UTF-8 text {what}; the byte at offset {exc.start} is not UTF-8", where) from None
    if "\x00" in text:
        raise SpecError(field, "binary data (NUL bytes)", f"a UTF-8 text {what}", where)
    return text


def read_yaml(path: str | os.PathLike, field: str = "(file)", what: str = "YAML file",
              max_bytes: int = MAX_YAML_BYTES) -> Any:
    """One YAML document (the bounded loader of specsim.errors: YAML 1.2 booleans, unique keys)."""
    where = str(path)
    text = read_text(path, field, what, max_bytes)
    try:
        return load_yaml_text(text)
    except YamlTooLarge as exc:
        raise SpecError(field, "<aliases>", f"a YAML document of plain values: {exc}", where) from None
    except yaml.YAMLError as exc:
        raise SpecError(field, "<unparseable>", f"valid YAML ({yaml_problem(exc)})", where) from None
    except RecursionError:
        raise SpecError(field, "<nested too deep>", "valid YAML of reasonable depth", where) from None


def yaml_problem(exc: Exception) -> str:
    """'duplicate key 'k' ... at line 4, column 3' for a PyYAML error."""
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(exc, 'problem', None) or exc.__class__.__name__}{at}"


def read_json(path: str | os.PathLike, field: str = "(file)", what: str = "JSON file",
              max_bytes: int = MAX_INPUT_BYTES) -> Any:
    """One JSON document (:func:`parse_json`: unique keys, 64-bit integers, bounded depth)."""
    where = str(path)
    return parse_json(read_text(path, field, what, max_bytes), field, where)


class JsonSyntaxError(SpecError):
    """Text that is not JSON at all (as opposed to JSON with a repeated key or a huge number):
    a reader that accepts several formats tries the next one."""


class _DuplicateJsonKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateJsonKey(key)
        out[key] = value
    return out


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > len(str(MAX_INT)) or abs(int(text)) > MAX_INT:
        raise OverflowError(text)
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):   # 1e999: a literal too large for a float (NaN and Infinity stay allowed)
        raise OverflowError(text)
    return value


def parse_json(text: str, field: str = "(file)", where: str | None = None, what: str = "valid JSON") -> Any:
    """A JSON value from `text`, strictly: a key repeated in one object is an error (JSON parsers
    keep the last one silently), an integer beyond 64 bits is an error (it would overflow a float
    far from here), and so is nesting beyond Python's recursion limit; each error names `field`,
    the key or value and `where`. `what` says what the text must be ("valid JSON", "one JSON
    value per line (line 4)")."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_int=_bounded_int, parse_float=_finite_float)
    except _DuplicateJsonKey as exc:
        raise SpecError(field, str(exc), f"{what} whose objects name each key once (key {str(exc)!r} is "
                        "repeated)", where) from None
    except OverflowError as exc:
        raise SpecError(field, short_repr(str(exc)), f"{what} whose numbers fit: integers in 64 bits (|n| <= {MAX_INT}), "
                        "decimals in a double (|x| < 1.8e308)",
                        where) from None
    except json.JSONDecodeError as exc:
        raise JsonSyntaxError(field, short_repr(text[max(0, exc.pos - 20): exc.pos + 20]),
                              f"{what} ({exc.msg} at line {exc.lineno}, column {exc.colno})", where) from None
    except (RecursionError, ValueError) as exc:   # ValueError: Python's limit on the digits of an int
        raise SpecError(field, "<nested too deep>" if isinstance(exc, RecursionError) else "<huge number>",
                        f"{what} of reasonable depth and size", where) from None


def json_lines_values(lines: list[str]) -> list[Any] | None:
    """Each line's one JSON value, decoded by the same strict rules as :func:`parse_json` (unique
    keys, 64-bit integers, finite decimals) in one pass without per-line error handling; None if
    any line breaks a rule or holds more or less than one value, so that the caller's per-line
    reader (:func:`jsonl_records`) then names the line and the rule."""
    decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_int=_bounded_int, parse_float=_finite_float)
    try:
        return list(map(decoder.decode, lines))
    except (ValueError, OverflowError, RecursionError):   # JSONDecodeError and _DuplicateJsonKey are ValueErrors
        return None


# --------------------------------------------------------------------------- strict records
def content_lines(text: str, comment: str | None = None) -> list[tuple[int, str]]:
    """(line number, line) for each non-blank line (and, with `comment`, not starting with it);
    only a newline ends a line, so a form feed or a vertical tab inside one stays in its cell
    (and is an error there) instead of splitting one record into two."""
    out = []
    for lineno, line in enumerate(text.split("\n"), start=1):   # lines end at \n (\r\n too), never at a form
        line = line.removesuffix("\r")                          # feed or another character splitlines() takes
        s = line.strip()
        if not s or (comment and s.startswith(comment)):
            continue
        out.append((lineno, line))
    return out


def csv_records(lines: list[tuple[int, str]], field: str, where: str | None,
                max_rows: int = MAX_ROWS) -> list[tuple[int, list[str]]]:
    """Each line parsed as one CSV record (strict): a quote must open and close a whole cell on
    its line; a stray quote, an unterminated one or a record over several lines is an error
    naming the line."""
    if len(lines) > max_rows + 1:
        raise SpecError(field, f"{len(lines):,} rows", f"at most {max_rows:,} rows", where)
    out = []
    for lineno, line in lines:
        if '"' in line:
            try:
                cells = next(csv.reader([line], strict=True, skipinitialspace=True))
            except csv.Error as exc:
                raise SpecError(field, short_repr(line.strip()), f"comma-separated values, each quote closing its "
                                f"cell on the same line (line {lineno}: {exc})", where) from None
            if line.count('"') % 2:
                raise SpecError(field, short_repr(line.strip()), f"comma-separated values without a stray quote "
                                f"(line {lineno})", where)
        else:
            cells = line.split(",")
        out.append((lineno, [c.strip() for c in cells]))
    return out


def jsonl_records(lines: list[tuple[int, str]], field: str, where: str | None,
                  max_rows: int = MAX_ROWS) -> list[tuple[int, Any]]:
    """Each line one JSON value; an unparseable line is an error naming it."""
    if len(lines) > max_rows:
        raise SpecError(field, f"{len(lines):,} records", f"at most {max_rows:,} records", where)
    return [(lineno, parse_json(line, field, where, f"one JSON value per line (line {lineno})"))
            for lineno, line in lines]


def number_column(cells: list[str] | np.ndarray, linenos: list[int] | np.ndarray | None, field: str,
                  where: str | None, *, integer: bool = False, positive: bool = True) -> np.ndarray:
    """A column of numeric text as a float array, converted in C (numpy); the first bad cell (not
    a number, not finite, not positive, or fractional where `integer`) is an error naming its line."""
    arr_s = np.asarray(cells, dtype=str)
    try:
        arr = arr_s.astype(float)
    except ValueError:
        arr = None
    if arr is not None:
        bad = ~np.isfinite(arr)
        if positive:
            bad |= ~(arr > 0)
        if integer:
            bad |= arr != np.floor(arr)
        if not bad.any():
            return arr
        i = int(np.flatnonzero(bad)[0])
    else:
        i = next(j for j, c in enumerate(arr_s) if not _is_float(c))
    line = int(linenos[i]) if linenos is not None else i + 1
    kind = "a whole number" if integer else "a finite number"
    allowed = f"{kind}{' > 0' if positive else ''} on every row (line {line})"
    raise SpecError(field, str(arr_s[i]), allowed, where)


def fast_number_column(text: str) -> np.ndarray | None:
    """A text that is one bare column of numbers (no commas, quotes or blanks inside a line) as a
    float array, parsed by pandas' C reader (10⁷ rows in about a second); None when the text is
    not that simple or any cell does not parse (the caller's line-by-line path then names the line)."""
    if '"' in text or "," in text or "\t" in text:
        return None

    import pandas as pd

    try:
        frame = pd.read_csv(io.StringIO(text), header=None, names=["v"], dtype=np.float64, engine="c",
                            skip_blank_lines=True, sep=",", quoting=3, na_filter=False)
    except (ValueError, TypeError, pd.errors.ParserError):
        return None
    return frame["v"].to_numpy()


def fast_csv_column(text: str, names: tuple[str, ...]) -> np.ndarray | None:
    """The first column of `names` (matched case-insensitively against a header row) of a simple
    CSV text, parsed by pandas' C reader, as a float array; None whenever the strict line-by-line
    reader (:func:`csv_records`) might read the text differently or refuse it, so that reader
    then answers and names the line. Simple means: no quotes, lines ending at ``\n`` only, a
    header row of distinct names that are not all numbers, every row exactly as wide as the
    header (a short row leaves a gap, a long one is a parser error: both defer), and a column
    pandas reads as numbers."""
    if '"' in text or text.count("\r") != text.count("\r\n"):
        return None
    start = 0
    while True:                                       # the first non-blank line is the header
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if line.strip() or end < 0:
            break
        start = end + 1
    header = [c.strip().lower() for c in line.removesuffix("\r").split(",")]
    if all(_is_float(c) for c in header) or len(set(header)) != len(header):
        return None
    col = next((header.index(k) for k in names if k in header), None)
    if col is None:
        return None

    import pandas as pd

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(io.StringIO(text), header=0, index_col=False, engine="c", skip_blank_lines=True,
                                sep=",", quoting=3)
    except (ValueError, TypeError, pd.errors.ParserError, pd.errors.ParserWarning):
        return None
    if frame.shape[1] != len(header) or frame.shape[0] == 0 or bool(frame.isna().to_numpy().any()):
        return None
    values = frame.iloc[:, col]
    if values.dtype.kind not in "iuf":
        return None
    return values.to_numpy(dtype=np.float64)


def _is_float(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def is_number(s: str) -> bool:
    return _is_float(s)


def resolve_input(path: str, base: str | os.PathLike | None = None) -> str:
    """`path` made absolute: relative to the folder of `base` (the file that named it) when given,
    else to the working folder. What ships to a worker on another machine must be absolute."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = (Path(base).resolve().parent / p) if base else (Path.cwd() / p)
    return str(p.absolute())


def read_csv_frame(path: str | os.PathLike, field: str = "(file)", what: str = "CSV file", **kwargs):
    """A CSV file as a pandas DataFrame (C parser), read through :func:`read_text`."""
    import pandas as pd

    text = read_text(path, field, what)
    try:
        return pd.read_csv(io.StringIO(text), **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        raise SpecError(field, str(path), f"a valid {what} ({' '.join(str(exc).split())[:200]})", str(path)) from None


def read_parquet_frame(path: str | os.PathLike, field: str = "(file)", what: str = "Parquet table"):
    """A Parquet file as a pandas DataFrame, read through :func:`read_bytes`."""
    import pandas as pd

    data = read_bytes(path, field, what)
    try:
        return pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises many types for a corrupt file
        raise SpecError(field, str(path), f"a valid {what} ({exc.__class__.__name__})", str(path)) from None
