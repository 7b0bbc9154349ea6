"""Atomic file writes: a temp file in the destination's directory, flushed and fsync'ed, then
`os.replace`d over the destination. A reader (or a rerun after a crash) sees the old file or the
new one, never half of one. The file gets the permissions an ordinary `open()` would give it
(0666 minus the umask: 0644 under umask 022), not mkstemp's private 0600.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_open", "save_figure", "write_bytes", "write_csv", "write_json", "write_parquet", "write_text"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temp file next to `path`; on a clean exit fsync it and rename it over `path`."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open mode must be 'wb' or 'w', got {mode!r}")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(dest.parent)


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (thread-safe), else by
    setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_open(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> Path:
    """JSON with sorted keys; floats as repr (exact round trip); NaN/inf as JSON NaN/Infinity."""
    return write_text(path, json.dumps(obj, indent=indent, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_csv(path: str | os.PathLike, frame) -> Path:
    """A pandas DataFrame as CSV (no index, '\\n' line ends, floats by repr: byte-stable)."""
    text = frame.to_csv(index=False, lineterminator="\n")
    return write_text(path, text)


def write_parquet(path: str | os.PathLike, frame) -> Path | None:
    """Parquet when pyarrow is importable; returns None (writes nothing) otherwise."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    import pyarrow as pa

    buf = io.BytesIO()
    try:
        frame.to_parquet(buf, index=False, engine="pyarrow")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # a column of mixed types (e.g. a swept field whose values are a name and a mapping):
        # such columns are stored as JSON text rather than failing the whole results folder
        buf = io.BytesIO()
        _mixed_as_text(frame).to_parquet(buf, index=False, engine="pyarrow")
    return write_bytes(path, buf.getvalue())


def _mixed_as_text(frame):
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = [None if v is None else v if isinstance(v, str) else json.dumps(v, default=str)
                        for v in out[col]]
    return out


def save_figure(path: str | os.PathLike, fig, **kwargs) -> Path:
    """A matplotlib figure as PNG (or by the suffix), written atomically."""
    buf = io.BytesIO()
    fmt = Path(path).suffix.lstrip(".") or "png"
    fig.savefig(buf, format=fmt, **kwargs)
    return write_bytes(path, buf.getvalue())


def write_with(path: str | os.PathLike, writer: Callable[[io.IOBase], None], mode: str = "wb") -> Path:
    """Call `writer(fh)` on a temp file and rename it into place."""
    with atomic_open(path, mode) as fh:
        writer(fh)
    return Path(path)


def remove_stale_temporaries(folder: str | os.PathLike) -> int:
    """Delete temp files an interrupted writer left behind (`.NAME.*.tmp`, as `atomic_open`
    names them). Safe while nothing else writes into `folder`; returns how many were removed."""
    removed = 0
    for p in Path(folder).rglob(".*.tmp"):
        try:
            p.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed
