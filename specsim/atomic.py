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
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specsim.errors import SpecError, os_reason

__all__ = ["LOCK", "MARKER", "FolderLock", "OutputError", "atomic_open", "dump_yaml", "output_folder", "output_path",
           "plain", "write_yaml", "save_figure", "write_bytes", "write_csv", "write_json", "write_parquet", "write_text"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[io.IOBase]:
    """Open a temp file next to `path`; on a clean exit fsync it and rename it over `path`."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open mode must be 'wb' or 'w', got {mode!r}")
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        check_regular_destination(dest)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as exc:   # named by the file the user asked for, not by a temporary name
        raise _named(exc, dest) from None
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if mode == "w" else {})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):   # a full disk while writing dest
            raise _named(exc, dest) from None
        raise
    _fsync_dir(dest.parent)


def _named(exc: OSError, dest: Path) -> OSError:
    """The same OS error, naming the file specsim was writing."""
    return type(exc)(exc.errno, exc.strerror or str(exc), str(dest))


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
    if isinstance(obj, (np.generic, np.ndarray, Path, set, frozenset)):
        return plain(obj)
    raise OutputError(f"not JSON serialisable: {type(obj).__name__}")


def plain(obj: Any) -> Any:
    """`obj` as plain Python types, recursively: numpy scalars and arrays to int/float/bool/str
    and lists, tuples and sets to lists, paths to strings, mapping keys likewise. Every YAML and
    JSON specsim writes goes through it, so a value that came through numpy or pandas (a swept
    true/false read back from a frame is a numpy bool) is written as the YAML/JSON it stands for."""
    if isinstance(obj, dict):
        return {plain(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [plain(v) for v in (sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj)]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


class OutputError(RuntimeError):
    """specsim could not write what it computed: a bug in specsim, never bad input (the message
    names the file and what could not be written)."""


def dump_yaml(obj: Any, **kwargs: Any) -> str:
    """YAML text of `obj` made plain first (:func:`plain`; yaml.safe_dump's keyword arguments)."""
    try:
        return yaml.safe_dump(plain(obj), **kwargs)
    except yaml.YAMLError as exc:   # a type plain() does not know: ours to fix, not the user's input
        raise OutputError(f"YAML output: cannot write {type(exc).__name__}: {exc}") from None


def write_yaml(path: str | os.PathLike, obj: Any, *, header: str = "", **kwargs: Any) -> Path:
    """`header` then `obj` as YAML (:func:`dump_yaml`) into `path`, atomically."""
    try:
        text = dump_yaml(obj, **kwargs)
    except OutputError as exc:
        raise OutputError(f"{path}: {exc}") from None
    return write_text(path, header + text)


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
    """A matplotlib figure as PNG (or by the suffix), written atomically. Every text on it is drawn
    as written, never as TeX: specsim's figures use no math markup, and a scenario name or a
    catalog name with `$` in it (`a$x^{$`) would otherwise be parsed as mathtext and fail the
    whole run after its simulations (texts made while drawing, tick labels, inherit the setting)."""
    import matplotlib
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)
    buf = io.BytesIO()
    fmt = Path(path).suffix.lstrip(".") or "png"
    with matplotlib.rc_context({"text.parse_math": False}):
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


# ============================================================================ the output-path rule
#: The marker file in every folder specsim writes: a folder holding it is specsim's.
MARKER = ".specsim"
#: The advisory lock file of a folder specsim writes into (holds the writer's PID).
LOCK = ".specsim.lock"
#: Bundled package files are never an output.
PACKAGE_DIR = Path(__file__).resolve().parent


def _refuse(option: str, path: str, allowed: str):

    return SpecError(option, path, allowed, where="command line")


def _kind(st_mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(st_mode):
            return name
    return "a special file"


def _inside_package(p: Path) -> bool:
    try:
        p.resolve().relative_to(PACKAGE_DIR)
        return True
    except (ValueError, OSError):
        return False


def output_path(path: str | os.PathLike | None, option: str = "--out", *, folder: bool, force: bool = False,
                create: bool = True) -> Path:
    """The one rule every output path of specsim follows (`--out` of run, plan, explain, validate,
    calibrate traces and calibrate kernels; :func:`output_folder` adds the lock). Returns the
    resolved path, creating a folder (with its marker) unless `create` is False (a check before
    work that precedes the folder's opening: `specsim run` starts its worker pool first).

    * every check is made on the path the writes will reach: the path resolved (symbolic links
      followed, `..` taken against what is on disk) -- `MISSING/../DIR` is DIR, and DIR is checked;
      the path returned is that resolved one, so no later write can land elsewhere;
    * an empty path is an error (it would mean the current folder);
    * a symbolic link to nothing (a dangling link) is refused: what it would create is not what
      the user named;
    * nothing inside the installed package (the bundled profiles and catalogs) is ever written;
    * a special file -- a device such as /dev/full, a FIFO, a socket -- is never written or replaced;
    * a folder (`folder=True`) is specsim's when it holds the marker file (:data:`MARKER`); a new
      or empty folder becomes specsim's; any other non-empty folder is refused unless `force`;
      a path that exists and is not a folder is refused;
    * a file (`folder=False`) that exists is replaced only with `force`; its folder must exist or
      be creatable.
    """
    text = "" if path is None else os.fspath(path)
    what = "folder" if folder else "file"
    if not str(text).strip():
        raise _refuse(option, str(text), f"a {what} path (an empty path would write into the current folder)")
    p = _resolved(str(text), option, what)
    if _inside_package(p):
        raise _refuse(option, str(p), f"a {what} outside the installed specsim package ({PACKAGE_DIR}): its "
                      "bundled files are never overwritten; write elsewhere and pass that path")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:

        raise _refuse(option, str(p), f"a {what} path specsim can use ({os_reason(exc)})") from None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise _refuse(option, str(p), f"a {what} path that is not a special file: this is {_kind(st.st_mode)}, "
                      "which specsim never writes to or replaces")
    if folder:
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise _refuse(option, str(p), "a folder (this path is a regular file)")
        if st is not None and not force and not (p / MARKER).is_file():
            try:
                entries = sorted(e.name for e in p.iterdir())
            except OSError as exc:

                raise _refuse(option, str(p), f"a folder specsim can read ({os_reason(exc)})") from None
            if entries:
                shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
                raise _refuse(option, str(p), f"a new or empty folder, or one specsim wrote (it holds the marker "
                              f"file {MARKER}); this folder holds other files ({shown}): choose another {option}, "
                              "or pass --force to write into it")
        if not create:
            return p
        try:
            p.mkdir(parents=True, exist_ok=True)
            if not (p / MARKER).is_file():
                write_text(p / MARKER, "This folder was written by specsim; this marker lets later specsim runs "
                           "write into it (docs/results.md).\n")
        except OSError as exc:

            raise _refuse(option, str(p), f"a folder specsim can create and write files in ({os_reason(exc)})") from None
        return p
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _refuse(option, str(p), "a file path (this path is a folder)")
    if st is not None and not force:
        raise _refuse(option, str(p), "a path where no file exists yet; this file exists: pass --force to "
                      "replace it, or choose another path")
    parent = p.parent
    if parent.exists() and not parent.is_dir():
        raise _refuse(option, str(p), f"a file in a folder ({parent} is not a folder)")
    return p


def _resolved(text: str, option: str, what: str) -> Path:
    """`text` resolved as the writes will reach it (os.path.realpath; relative to the working folder
    when it lies inside it, so `results/x` stays `results/x` in what is printed); a dangling link
    refused."""
    try:
        if os.path.islink(text) and not os.path.exists(text):
            raise _refuse(option, text, f"a {what} path that exists or is new; this is a symbolic link to "
                          f"{os.readlink(text)}, which does not exist: remove the link or pass its target")
        real = os.path.realpath(text)
        cwd = os.getcwd()   # a real path: a relative result below it reaches the same place
        if not os.path.isabs(text) and (real == cwd or real.startswith(cwd.rstrip(os.sep) + os.sep)):
            return Path(os.path.relpath(real, cwd))   # shown as the user wrote it, where it lands
        return Path(real)
    except (OSError, ValueError) as exc:

        why = os_reason(exc) if isinstance(exc, OSError) else str(exc)
        raise _refuse(option, text, f"a {what} path specsim can resolve ({why})") from None


@contextlib.contextmanager
def output_folder(path: str | os.PathLike | None, option: str = "--out", *, force: bool = False) -> Iterator[Path]:
    """The results folder of a command that writes one (run, plan, explain, validate, calibrate
    kernels): :func:`output_path`'s rule on the resolved path (the folder created with its marker),
    then its :class:`FolderLock` held until the block ends. Yields the resolved folder: every write
    goes there. Call it before any work, so a refused folder costs nothing."""
    folder = output_path(path, option, folder=True, force=force)
    with FolderLock(folder, option):
        yield folder


def check_regular_destination(dest: Path) -> None:
    """Refuse to replace a special file (a device, a FIFO, a socket) or a folder with a file."""
    try:
        st = os.stat(dest)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):

        raise SpecError("(output file)", str(dest), f"a path that is a regular file or nothing yet; this is "
                        f"{_kind(st.st_mode)}, which specsim never writes to or replaces", str(dest))


class FolderLock:
    """An advisory lock on a folder specsim writes into: `fcntl.flock` on its :data:`LOCK` file,
    which holds the owner's PID. A second writer into the same folder fails at once, naming the
    PID, instead of both writing and one losing its results. Released when the block ends (or
    when the process dies: the kernel drops a dead process's flock)."""

    def __init__(self, folder: str | os.PathLike, option: str = "--out"):
        self.folder, self.option, self.fd = Path(folder), option, None

    def __enter__(self) -> FolderLock:  # noqa: PYI034
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock
            return self
        path = self.folder / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                         0o666 & ~current_umask())
        except OSError as exc:

            raise _refuse(self.option, str(self.folder), f"a folder specsim can lock ({LOCK}: "
                          f"{os_reason(exc)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                owner = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            except OSError:
                owner = "unknown"
            os.close(fd)
            raise _refuse(self.option, str(self.folder), f"a folder no other specsim process is writing into: "
                          f"process {owner} holds its lock ({LOCK}); wait for it to finish, or choose another "
                          f"{self.option}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)   # closing drops the flock
            self.fd = None
