"""Length files parsed once per machine, not once per process.

A sweep, plan or explain resolves its scenario in the parent and again in every worker process
(the pool starts fresh interpreters: `study/executors.py`), so a large length file would be parsed
once per process. The first parse of a file of at least MIN_CACHED_LENGTHS lengths stores the
validated array as a `.npy` file under the user's cache folder; every later process, while the
file is unchanged, loads that array (a memory copy, no parsing) instead.

- Where: ``$SPECSIM_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/specsim``, else
  ``~/.cache/specsim`` (the XDG base-directory convention), sub-folder ``lengths/``.
- Key: SHA-256 of the file's resolved path, modification time (ns), size, the column read and
  READER_VERSION (bumped whenever the reader's rules change), so an edited file, another column
  or a new reader never meets an old entry.
- Writes are atomic (a temporary file renamed into place); a cache that cannot be read or written
  (read-only home, full disk, a damaged entry) is skipped silently and the file is parsed, so the
  cache can never change an answer, only its time. At most MAX_ENTRIES entries are kept (oldest
  removed first).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from specsim import atomic
from specsim.errors import SpecError
from specsim.workload.lengths.checks import read_lengths_file

#: the version of the length reader's rules (workload/lengths/checks.py) that entries were written under
READER_VERSION = 1
#: smaller files parse faster than their cache entry is found and loaded
MIN_CACHED_LENGTHS = 100_000
MAX_ENTRIES = 16


def cache_folder() -> Path:
    """The folder of parsed length files (see the module docstring for the lookup order)."""
    explicit = os.environ.get("SPECSIM_CACHE_DIR")
    if explicit:
        return Path(explicit) / "lengths"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "specsim" / "lengths"


def _entry(path: Path, column: str | None, mtime_ns: int, size: int) -> Path:
    key = "\0".join((str(READER_VERSION), str(path.resolve()), str(mtime_ns), str(size), column or ""))
    return cache_folder() / (hashlib.sha256(key.encode()).hexdigest() + ".npy")


def _load(entry: Path) -> np.ndarray | None:
    try:
        values = np.load(entry, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if values.ndim != 1 or values.dtype != np.float64 or values.size == 0:
        return None
    return values


def _store(entry: Path, values: np.ndarray) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_with(entry, lambda f: np.save(f, values, allow_pickle=False))
        entries = sorted(entry.parent.glob("*.npy"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except (OSError, SpecError):   # SpecError: the entry's name is taken by something not a file
        return


def parsed_lengths(path: Path, fld: str, column: str | None, mtime_ns: int, size: int) -> np.ndarray:
    """The lengths in `path` (:func:`~specsim.workload.lengths.checks.read_lengths_file`'s rules
    and errors), from this machine's cache when an earlier process parsed the same file version.
    `mtime_ns` and `size` are the file's identity as the caller stat'ed it (size < 0: unknown, so
    never cached)."""
    entry = _entry(path, column, mtime_ns, size) if size >= 0 else None
    if entry is not None:
        cached = _load(entry)
        if cached is not None:
            return cached
    values = read_lengths_file(path, fld, column)
    if entry is not None and values.size >= MIN_CACHED_LENGTHS:
        _store(entry, values)
    return values
