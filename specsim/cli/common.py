"""What every specsim command shares: the error wrapper, the common options and the output helpers.

Both :mod:`specsim.cli.app` (the app and most commands) and :mod:`specsim.cli.run` (`run`,
`show scenario`) import this module; neither imports the other at import time, so there is no cycle.

Errors. Every command runs inside :func:`user_errors` (via the :func:`handle_errors` decorator):
bad input of any kind (ScenarioError, SpecError, LayoutError, a missing file, bad YAML) prints one
paragraph ``error: <file>: <field>: <allowed>, got <value>`` to stderr and exits 2 — never a
traceback. An unexpected exception (a bug) prints ``internal error: ...`` and exits 1; set
SPECSIM_DEBUG=1 to see its traceback. Ctrl-C exits 130 with a resume hint.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from specsim.catalog.models import CATALOG_ENV
from specsim.errors import LayoutError, SpecError, os_reason
from specsim.scenario import ScenarioError, load_scenario
from specsim.study.executors import Terminated, sigint_latch
from specsim.study.report.tables import jsonable

COMMAND_LINE = "command line"
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130

__all__ = ["COMMAND_LINE", "EXIT_INTERNAL_ERROR", "EXIT_USER_ERROR", "USER_ERRORS", "CatalogOpt", "Format",
           "FormatOpt", "HardwareOpt", "SetOpt", "bad_option", "billions", "console", "emit_json", "error_message",
           "handle_errors", "load_scenario_opts", "option_errors", "table", "use_catalog", "user_errors"]


# ============================================================================ errors → exit 2
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _short_repr(value: Any, limit: int = 120) -> str:
    v = repr(value)
    return v if len(v) <= limit else v[: limit - 3] + "..."


def error_message(exc: BaseException) -> str:
    """The one-paragraph message for a user error: ``<file>: <field>: <allowed>, got <value>``."""
    if isinstance(exc, ScenarioError):
        return exc.message()
    if isinstance(exc, SpecError):
        return f"{exc.where or COMMAND_LINE}: {exc.field}: must be {exc.allowed}, got {_short_repr(exc.value)}"
    if isinstance(exc, LayoutError):
        return str(exc)
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        name = getattr(mark, "name", None) or "(yaml)"
        return f"{name}: (file): valid YAML ({getattr(exc, 'problem', None) or exc.__class__.__name__}), got <unparseable>"
    if isinstance(exc, UnicodeDecodeError):
        return "(file): (file): a UTF-8 text file, got <binary>"
    if isinstance(exc, OSError):   # what the operating system said, in words (ENOSPC, EFBIG, ECONNREFUSED, ...)
        name = exc.filename if exc.filename is not None else None
        what = os_reason(exc)
        if name is None:
            return f"(system): the operation failed: {what}"
        return f"{name}: (file): a path specsim can read or write; the operating system said: {what}"
    return f"{exc.__class__.__name__}: {exc}"


USER_ERRORS: tuple[type[BaseException], ...] = (ScenarioError, SpecError, LayoutError, yaml.YAMLError,
                                                UnicodeDecodeError, OSError)


def _fail(msg: str, code: int = EXIT_USER_ERROR) -> None:
    """Print ``error: msg`` (one paragraph) to stderr and exit with `code` (2: bad input)."""
    typer.echo(f"error: {_one_line(msg)}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Map user errors to one stderr paragraph + exit 2, bugs to ``internal error`` + exit 1, and
    Ctrl-C to one line + exit 130 -- also a Ctrl-C whose KeyboardInterrupt Python dropped inside a
    finalizer (executors.sigint_latch): the command then ends as interrupted, not as a success."""
    try:
        with sigint_latch() as interrupted:
            yield
            if interrupted.is_set():
                raise KeyboardInterrupt
    except (typer.Exit, typer.Abort):
        raise
    except BrokenPipeError:
        quiet_closed_stdout()   # the reader went away (`| head -1`): nothing left to say, not an error
        raise typer.Exit(0) from None
    except KeyboardInterrupt as exc:
        typer.echo(f"{'terminated' if isinstance(exc, Terminated) else 'interrupted'}: every finished point is "
                   "already saved; rerun the same command to resume", err=True)
        raise typer.Exit(143 if isinstance(exc, Terminated) else EXIT_INTERRUPTED) from None
    except USER_ERRORS as exc:
        if isinstance(exc, OUTPUT_YAML_ERRORS):   # writing YAML failed: a bug, never the user's input
            _internal(exc)
        _fail(error_message(exc))
    except Exception as exc:  # a bug, not bad input
        _internal(exc)


#: YAML errors of writing (representing, serialising, emitting), as opposed to reading
OUTPUT_YAML_ERRORS = (yaml.representer.RepresenterError, yaml.serializer.SerializerError, yaml.emitter.EmitterError)


def _internal(exc: BaseException) -> None:
    """Report a bug (`internal error`, exit 1); SPECSIM_DEBUG=1 shows the traceback instead."""
    if os.environ.get("SPECSIM_DEBUG"):
        raise exc
    typer.echo(f"internal error: {_one_line(f'{exc.__class__.__name__}: {exc}')} "
               "(this is a bug in specsim; rerun with SPECSIM_DEBUG=1 for the traceback)", err=True)
    raise typer.Exit(EXIT_INTERNAL_ERROR) from None


def quiet_closed_stdout() -> None:
    """After the reader of stdout went away: point stdout at /dev/null, so the interpreter's last
    flush at exit does not fail again (Python would print "Exception ignored ... BrokenPipeError")."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def safe_streams() -> None:
    """Make stdout/stderr safe to print to whatever the environment: a closed stream (`>&-`,
    where Python sets sys.stdout to None) becomes /dev/null; a non-UTF-8 locale (`LC_ALL=C
    PYTHONUTF8=0`) keeps its encoding, and characters it cannot encode (×, τ, ≤) print as '?'
    instead of failing."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - lives as long as the process
            continue
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if enc != "utf8" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(OSError, ValueError):
                stream.reconfigure(errors="replace")


def handle_errors(fn: Callable) -> Callable:
    """Decorator: run a command inside :func:`user_errors`. Put it below ``@app.command``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with user_errors():
            return fn(*args, **kwargs)

    return wrapper


def bad_option(option: str, value: Any, allowed: str) -> SpecError:
    """A SpecError for a command-line option (``--tp``), located at the command line."""
    return SpecError(option, value, allowed, where=COMMAND_LINE)


@contextlib.contextmanager
def option_errors(options: Mapping[str, str] | None = None) -> Iterator[None]:
    """Rename a library SpecError's field to the option that set it: `options[field]` where given
    (``position_decay`` → ``--decay``), else the field's last part (``tp`` or ``layout.tp`` →
    ``--tp``, ``weight_dtype`` → ``--weight-dtype``). Wrap only calls whose fields are all options."""
    try:
        yield
    except SpecError as exc:
        option = (options or {}).get(exc.field) or "--" + exc.field.rsplit(".", 1)[-1].replace("_", "-")
        raise bad_option(option, exc.value, exc.allowed) from None


# ============================================================================ shared options
class Format(str, Enum):
    table = "table"
    json = "json"


SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", "-s", metavar="PATH=VALUE",
    help="Override a scenario field, e.g. --set speculation.k=5 or --set 'sweep.speculation.k=[0,3]' (repeatable).")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
CalibrationOpt = Annotated[str | None, typer.Option(
    "--calibration", metavar="DIR",
    help="The calibration data folder (targets/, published/) whose files are the defaults (default: the first "
         "calibration/ folder in the working directory or a folder above it).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write into a non-empty --out folder specsim did not write "
                                                       "(or one holding another scenario's results, which are "
                                                       "discarded).")]
FreshOpt = Annotated[bool, typer.Option("--fresh", help="Discard the results already in the folder and recompute "
                                                       "everything (default: resume).")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Hardware profile name (specsim list hardware) or YAML path.")]
CatalogOpt = Annotated[list[str] | None, typer.Option(
    "--catalog", metavar="DIR",
    help="A user model catalog: a directory of Hugging Face config.json files (NAME.json, or NAME/config.json); "
         "repeatable; searched before $SPECSIM_CATALOG and the bundled catalog.")]


@contextlib.contextmanager
def use_catalog(dirs: list[str] | None) -> Iterator[None]:
    """Run the body with the `--catalog` directories prepended to $SPECSIM_CATALOG (worker processes
    inherit it); the variable is restored afterwards."""
    if not dirs:
        yield
        return
    for d in dirs:
        if not os.path.isdir(d):
            raise bad_option("--catalog", d, "an existing directory of Hugging Face config.json files "
                                             "(NAME.json or NAME/config.json)")
    before = os.environ.get(CATALOG_ENV)
    os.environ[CATALOG_ENV] = os.pathsep.join([os.path.abspath(d) for d in dirs] + ([before] if before else []))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CATALOG_ENV, None)
        else:
            os.environ[CATALOG_ENV] = before


# ============================================================================ output
class _Console(Console):
    """rich's Console, whose broken-pipe handling (exit 1) ends the command quietly instead: the
    reader went away (`| head -1`), which is not a failure of the command."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    """A console on the current stdout (so test runners capture it); wide when not a terminal."""
    out = sys.stdout
    return _Console(file=out, width=None if out.isatty() else 160, soft_wrap=False, highlight=False)


def emit_json(obj: Any) -> None:
    """Print `obj` as indented JSON (numpy scalars, paths, dataclasses made JSON-safe first)."""
    typer.echo(json.dumps(jsonable(obj), indent=2))


def gb_label(key: str) -> str:
    """A table label for a `*_gb` JSON key of a memory plan: 'kv_cache_gb' -> 'KV cache', 'hbm_gb' ->
    'GPU memory (CUDA)' (the plan's whole is what CUDA gives a process, not the datasheet's HBM)."""
    if key == "hbm_gb":
        return "GPU memory (CUDA)"
    words = key.removesuffix("_gb").split("_")
    return " ".join(w.upper() if w in ("kv", "hbm") else w for w in words)


def billions(params: float) -> str:
    """'8.19 B' for 8.19e9 parameters."""
    return f"{params / 1e9:.2f} B"


def load_scenario_opts(path: str, sets: list[str] | None):
    """The scenario at `path` with the ``--set PATH=VALUE`` overrides applied."""
    return load_scenario(path, list(sets or ()))


def table(title: str, *columns: str, right_from: int = 1) -> Table:
    """A rich table titled on the left; columns from index `right_from` on are right-aligned."""
    t = Table(title=title, title_justify="left", header_style="bold", min_width=len(title) + 2)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= right_from else "left")
    return t
