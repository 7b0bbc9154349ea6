"""User-facing input errors (each names the field, the value and what is allowed) and the one
YAML loader every input file goes through.

The loader is PyYAML's safe loader (libyaml's C parser when available) with two changes:

* YAML 1.2 booleans: only ``true``/``false`` are booleans. YAML 1.1 also reads ``off``, ``on``,
  ``yes``, ``no`` (and ``y``/``n``) as booleans, which turns ``speculation.policy: off`` into
  ``False``; here they stay strings, and the schema turns ``yes``/``no``/``on``/``off`` into
  booleans where it wants a boolean (pydantic accepts those strings for ``bool`` fields).
* Bounded aliases: anchors and aliases share objects, so a 600-byte "billion laughs" document
  loads instantly but expands to 10⁹ values the moment anything walks it (validation, repr,
  deepcopy). After loading, the document is walked with a budget of ``MAX_YAML_VALUES`` values
  (every alias counted each time it is used); a document over it is refused with
  :class:`YamlTooLarge` before anything else touches it.

Error values are shown with :func:`short_repr`, a bounded ``repr`` (its cost does not grow with
the value), so an error about a huge value is printed at once.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

import yaml

#: The most values (mappings, sequences and scalars, aliases counted every time they are used)
#: one YAML document may expand to. The largest bundled scenario has under 200.
MAX_YAML_VALUES = 100_000

_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL_TAG = "tag:yaml.org,2002:bool"


class _Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """Safe loader with YAML 1.2 booleans (only true/false)."""


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
        super().__init__(self.message())

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
        self.engine, self.step, self.quantity = engine, step, quantity
        super().__init__(f"internal invariant violated in {engine} at step {step}: {quantity}: {detail}")
