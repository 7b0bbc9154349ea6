"""The scenario reference page (docs/reference/scenario.md), rendered from the schema.

:func:`scenario_reference_markdown` walks :class:`~specsim.scenario.schema.Scenario` and its
section models in declaration order (nested sections after their parent, a model used at several
paths once) and renders one Markdown table per section: field, type (from the annotation and the
field's numeric bounds), default and meaning (the field's `description`). The page is checked in
and a test compares it with this function, so the reference cannot drift from the schema.
Regenerate it with::

    .venv/bin/python -c "from specsim.scenario.reference import scenario_reference_markdown as m; print(m(), end='')" > docs/reference/scenario.md
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from specsim.scenario.schema import Scenario

__all__ = ["REGENERATE", "render_default", "render_type", "scenario_reference_markdown", "sections"]

#: The shell command that rewrites the checked-in page.
REGENERATE = (".venv/bin/python -c \"from specsim.scenario.reference import scenario_reference_markdown as m; "
              "print(m(), end='')\" > docs/reference/scenario.md")

_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


# ----------------------------------------------------------------------------- types
def _section_model(tp: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (`X` or `X | None`), else None."""
    members = [a for a in (typing.get_args(tp) if _is_union(tp) else (tp,)) if a is not type(None)]
    if len(members) == 1 and isinstance(members[0], type) and issubclass(members[0], BaseModel):
        return members[0]
    return None


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _name(tp: Any) -> str:
    """A readable name for an annotation: int, `a | b`, list[...], null, section."""
    if tp is type(None) or tp is None:
        return "null"
    if tp is Any:
        return "any"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join("null" if a is None else str(a) for a in typing.get_args(tp))
    if _is_union(tp):
        return " | ".join(_name(a) for a in typing.get_args(tp))
    if origin in (list, tuple, set, frozenset, dict):
        return f"{origin.__name__}[{', '.join(_name(a) for a in typing.get_args(tp))}]"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "section"
    return getattr(tp, "__name__", str(tp))


def _number(v: Any) -> str:
    """A bound, readably: 1, 0.5, 10⁶, 2⁶³ − 1."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        a = abs(v)
        sign = "-" if v < 0 else ""
        if a >= 10**4 and str(a).rstrip("0") == "1":
            return f"{sign}10{str(len(str(a)) - 1).translate(_SUPERSCRIPT)}"
        if a >= 2**16 and (a + 1) & a == 0:
            return f"{sign}2{str((a + 1).bit_length() - 1).translate(_SUPERSCRIPT)} − 1"
        return str(v)
    return repr(v)


def _bounds(metadata: list[Any]) -> str:
    """`≥ 1`, `in (0, 1]`, `< 1`, plus `≤ n items` for a length limit; "" when unbounded."""
    lo = hi = None
    lo_closed = hi_closed = True
    min_len = max_len = None
    for m in metadata:
        if isinstance(m, Ge):
            lo, lo_closed = m.ge, True
        elif isinstance(m, Gt):
            lo, lo_closed = m.gt, False
        elif isinstance(m, Le):
            hi, hi_closed = m.le, True
        elif isinstance(m, Lt):
            hi, hi_closed = m.lt, False
        elif isinstance(m, MaxLen):
            max_len = m.max_length
        elif isinstance(m, MinLen):
            min_len = m.min_length
    parts = []
    if lo is not None and hi is not None:
        parts.append(f"in {'[' if lo_closed else '('}{_number(lo)}, {_number(hi)}{']' if hi_closed else ')'}")
    elif lo is not None:
        parts.append(f"{'≥' if lo_closed else '>'} {_number(lo)}")
    elif hi is not None:
        parts.append(f"{'≤' if hi_closed else '<'} {_number(hi)}")
    if min_len is not None and max_len is not None:
        parts.append(f"{min_len} to {max_len} items")
    elif max_len is not None:
        parts.append(f"≤ {max_len} items")
    elif min_len is not None:
        parts.append(f"≥ {min_len} items")
    return ", ".join(parts)


def render_type(field: FieldInfo) -> str:
    """A field's type as the reference shows it: the annotation's members (`a | b` for Literal
    choices and unions, `null` for None) with the numeric bounds attached to the non-null part:
    `int ≥ 1`, `float in (0, 1] | null`."""
    tp = field.annotation
    members = list(typing.get_args(tp)) if _is_union(tp) else [tp]
    nullable = type(None) in members
    core_members = [m for m in members if m is not type(None)]
    core = " | ".join(_name(m) for m in core_members)
    bounds = _bounds(field.metadata)
    if bounds:
        if len(core_members) > 1 or (core_members and typing.get_origin(core_members[0]) is Literal):
            core = f"({core})"
        core = f"{core} {bounds}"
    return f"{core} | null" if nullable else core


# ----------------------------------------------------------------------------- defaults
def _value(v: Any) -> str:
    """A default as YAML flow text: null, true, 0.9, results, {speculation.policy: off}."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v if v else '""'
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, BaseModel):
        return _value(v.model_dump(exclude_defaults=True))
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_value(k)}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def render_default(field: FieldInfo) -> str:
    """`—` for a required field; "defaults" for a section left at its own defaults; else the
    default in backticks."""
    if field.is_required():
        return "—"
    v = field.get_default(call_default_factory=True, validated_data={})
    if isinstance(v, BaseModel) and not v.model_dump(exclude_defaults=True):
        return "defaults"
    return f"`{_value(v)}`"


# ----------------------------------------------------------------------------- the page
def sections(root: type[BaseModel] | None = None) -> list[tuple[type[BaseModel], list[str]]]:
    """Every model under `root` (default: Scenario) with the dotted paths it is used at, the root
    first (path ""), then depth-first in declaration order; a model used at several paths once."""
    if root is None:
        root = Scenario
    order: list[type[BaseModel]] = []
    paths: dict[type[BaseModel], list[str]] = {}

    def visit(model: type[BaseModel], path: str) -> None:
        if model not in paths:
            order.append(model)
            paths[model] = []
        paths[model].append(path)
        for name, fld in model.model_fields.items():
            sub = _section_model(fld.annotation)
            if sub is not None:
                visit(sub, f"{path}.{name}" if path else name)

    visit(root, "")
    return [(m, paths[m]) for m in order]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _doc(model: type[BaseModel]) -> tuple[str, str]:
    """(title, body) of a model's own docstring: the first line without its full stop, the rest."""
    doc = inspect.cleandoc(model.__dict__.get("__doc__") or "")
    title, _, body = doc.partition("\n")
    return title.strip().rstrip("."), body.strip()


def scenario_reference_markdown() -> str:
    """The scenario reference page: an intro, then per section a heading (its path and the first
    line of its docstring), the rest of the docstring, and a field | type | default | meaning table."""
    out = [
        "# Scenario fields",
        "",
        "A scenario is one YAML file (see `scenarios/` and [Writing a scenario](../scenarios.md)). Every section",
        "forbids unknown keys (with a did-you-mean), refuses true/false for a number (`k: true` is not",
        "k = 1) and NaN/inf for any number; an error names the file, the dotted field path, the value and",
        "what is allowed. Types: `a | b` is a choice, `null` means the field may be omitted (or set to",
        "null); bounds are inclusive with `[`/`]` and `≥`/`≤`, exclusive with `(`/`)` and `>`/`<`. The",
        "default is \"—\" for a required field and \"defaults\" for a section left at its own defaults.",
        "",
        "This page is generated from `specsim/scenario/schema.py` by `scenario_reference_markdown`",
        "(`specsim/scenario/reference.py`); do not edit by hand. Regenerate it with",
        "",
        "```bash",
        REGENERATE,
        "```",
    ]
    for model, paths in sections():
        title, body = _doc(model)
        where = ", ".join(f"`{p}`" for p in paths) if paths != [""] else "top level"
        out += ["", f"### {where} — {title}" if title else f"### {where}"]
        if body:
            out += ["", body]
        out += ["", "| field | type | default | meaning |", "|---|---|---|---|"]
        for name, fld in model.model_fields.items():
            out.append(f"| `{name}` | {_cell(render_type(fld))} | {_cell(render_default(fld))} | "
                       f"{_cell(fld.description or '')} |")
    return "\n".join(out) + "\n"
