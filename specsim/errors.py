"""User-facing input errors (each names the field, the value and what is allowed) and the one
YAML loader every input file goes through.

The loader is PyYAML's safe loader (libyaml's C parser when available) with two changes:

* YAML 1.2 booleans: only ``true``/``false`` are booleans. YAML 1.1 also reads ``off``, ``on``,
  ``yes``, ``no`` (and ``y``/``n``) as booleans, which turns ``speculation.policy: off`` into
  ``False``; here they stay strings, and a field that wants a boolean takes only ``true`` or
  ``false`` (scenario/base.py: ``yes``, ``on`` or ``1`` there is an error, not a silent true).
* Duplicate keys are an error: YAML says a mapping's keys are unique, PyYAML keeps the last one
  silently (``k: 2`` then ``k: 5`` ran with 5). Here a repeated key raises :class:`DuplicateKey`
  (a ``yaml.YAMLError``, so every caller's "valid YAML" error names it with its line).
* Bounded integers: an integer literal beyond 64 bits (:data:`MAX_INT`) is an error naming its
  line. No count, size or seed specsim reads comes near it, and a 400-digit literal would
  otherwise reach arithmetic that overflows a float far from the file that held it.
* Bounded aliases: anchors and aliases share objects, so a 600-byte "billion laughs" document
  loads instantly but expands to 10⁹ values the moment anything walks it (validation, repr,
  deepcopy). After loading, the document is walked with a budget of ``MAX_YAML_VALUES`` values
  (every alias counted each time it is used); a document over it is refused with
  :class:`YamlTooLarge` before anything else touches it.

Error values are shown with :func:`short_repr`, a bounded ``repr`` (its cost does not grow with
the value), so an error about a huge value is printed at once.
"""

from __future__ import annotations

import errno as _errno
import re
import reprlib
import socket
from typing import Any

import yaml

#: The most values (mappings, sequences and scalars, aliases counted every time they are used)
#: one YAML document may expand to. The largest bundled scenario has under 200.
MAX_YAML_VALUES = 100_000

_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL_TAG = "tag:yaml.org,2002:bool"


#: the largest integer any input may hold (a signed 64-bit integer): YAML, JSON and --set values
MAX_INT = 2**63 - 1


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that names one key twice (YAML requires unique keys)."""


class _Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe loader with YAML 1.2 booleans (only true/false) and unique mapping keys."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                try:
                    key = self.construct_object(key_node, deep=True)
                    hash(key)
                except Exception:  # noqa: BLE001, S112 - an unhashable key: the base constructor says so
                    continue
                if key in seen:
                    first = seen[key]
                    raise DuplicateKey(None, None, f"duplicate key {key!r} (first at line {first + 1}; each key "
                                       "once per mapping)", key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INT:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of at most 64 bits (|n| <= {MAX_INT}), got one of {len(str(abs(value)))} "
                "digits", node.start_mark)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for ch, resolvers in _BASE_LOADER.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class YamlTooLarge(ValueError):
    """A YAML document that expands (through aliases) to more than MAX_YAML_VALUES values."""


def yaml_size_ok(doc: Any, limit: int = MAX_YAML_VALUES) -> int:
    """Count the values of a loaded document, aliases expanded, stopping at `limit`.

    Returns the count; raises YamlTooLarge once it passes `limit` (the walk never does more than
    `limit` steps, so a self-referencing or exponential document fails fast)."""
    stack = [doc]
    n = 0
    while stack:
        obj = stack.pop()
        n += 1
        if n > limit:
            raise YamlTooLarge(f"the document expands to more than {limit:,} values (anchors and aliases "
                               "multiply it); write the values out or use fewer aliases")
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return n


def load_yaml_text(text: str, limit: int = MAX_YAML_VALUES):
    """Safe-load one YAML document (YAML 1.2 booleans), refusing one over `limit` values."""
    doc = yaml.load(text, Loader=_Loader)
    yaml_size_ok(doc, limit)
    return doc


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxtuple = 3, 6, 8, 8
_REPR.maxset, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 8, 100, 100, 60


def short_repr(value: Any, limit: int = 120) -> str:
    """repr(value), cut to about `limit` characters; the cost is bounded whatever the value."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__: name the type instead
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SpecError(ValueError):
    """A bad input value. `field` is a dotted path (e.g. 'drafter.tau'); `where` (a file) may be filled in later by the loader."""

    def __init__(self, field: str, value, allowed: str, where: str | None = None):
        self.field, self.value, self.allowed, self.where = field, value, allowed, where
        # args are the constructor's arguments, so `type(e)(*e.args)` -- how simpy re-raises an
        # exception from inside a process, and how pickle rebuilds one -- gives the same error
        super().__init__(field, value, allowed, where)

    def __str__(self) -> str:
        return self.message()

    def message(self) -> str:
        loc = f" in {self.where}" if self.where else ""
        return f"{self.field} must be {self.allowed}, got {short_repr(self.value)}{loc}"


class LayoutError(ValueError):
    """A model/layout that does not fit on the GPUs: says what needs how much on which GPU."""


class InvariantError(RuntimeError):
    """An internal consistency check failed during a simulation (a bug, never a user error).

    Names the engine, the step and the quantity so the failure can be reproduced.
    """

    def __init__(self, engine: str, step: int, quantity: str, detail: str):
        self.engine, self.step, self.quantity, self.detail = engine, step, quantity, detail
        super().__init__(engine, step, quantity, detail)   # reconstructible: type(e)(*e.args)

    def __str__(self) -> str:
        return (f"internal invariant violated in {self.engine} at step {self.step}: {self.quantity}: "
                f"{self.detail}")


#: errno -> what it means, in words, for the errors a user can meet reading or writing files
_ERRNO_WORDS = {
    "ENOENT": "no such file or folder", "EACCES": "permission denied", "EPERM": "operation not permitted",
    "ENOSPC": "no space left on the device (disk full)", "EDQUOT": "disk quota exceeded",
    "EFBIG": "file too large (the file-size limit was reached)", "EROFS": "read-only file system",
    "EISDIR": "it is a folder", "ENOTDIR": "a part of the path is not a folder", "EEXIST": "it already exists",
    "ENAMETOOLONG": "the name is too long", "ELOOP": "too many symbolic links", "EMFILE": "too many open files",
    "EIO": "input/output error (the device failed)", "ENXIO": "no such device (nothing reads or writes there)",
    "ENODEV": "no such device", "EBADF": "the stream is closed", "EPIPE": "the reader went away (broken pipe)",
    "ECONNREFUSED": "connection refused (nothing listens there)", "ETIMEDOUT": "the connection timed out",
    "EHOSTUNREACH": "no route to the host", "ENETUNREACH": "the network is unreachable",
    "ECONNRESET": "the connection was reset by the other side", "EAGAIN": "resource temporarily unavailable",
    "EBUSY": "the device or file is busy", "ETXTBSY": "the file is busy", "EXDEV": "a move across file systems",
}


def os_reason(exc: BaseException) -> str:
    """What the operating system said, in words: 'no space left on the device (disk full)
    [ENOSPC]' for an OSError with errno ENOSPC; the strerror (or the class name) otherwise."""
    if isinstance(exc, socket.timeout):
        return "no answer before the timeout"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror or exc})"
    code = getattr(exc, "errno", None)
    name = _errno.errorcode.get(code) if isinstance(code, int) else None
    if name in _ERRNO_WORDS:
        return f"{_ERRNO_WORDS[name]} [{name}]"
    text = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
    return f"{text} [{name}]" if name else text
