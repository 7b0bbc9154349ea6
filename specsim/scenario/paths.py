"""Dotted field paths (`speculation.k`) and the sweep's shape: which paths name fields, and how
many rows a `sweep:` section asks for, counted without expanding it."""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import BaseModel

from specsim.errors import short_repr
from specsim.scenario.base import field_error

#: The most rows (swept combinations × replicates) one scenario may ask for. Each row is at least
#: one pipeline simulation (plus its baselines), seconds to minutes each: 10,000 rows is already
#: hours on a workstation. `specsim check` and `specsim show scenario` report the count.
MAX_SWEEP_ROWS = 10_000


def model_for_path(path: list[str], root: type[BaseModel]) -> type[BaseModel] | None:
    """The section model at a dotted path below `root` (the Scenario class), or None."""
    model: type[BaseModel] | None = root
    for part in path:
        if model is None:
            return None
        fld = model.model_fields.get(part)
        if fld is None:
            return None
        ann = fld.annotation
        nxt = None
        for cand in getattr(ann, "__args__", ()) + (ann,):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
        model = nxt
    return model


def path_problem(path: str, root: type[BaseModel]) -> str | None:
    """Why a dotted path does not name a scenario field (None when it does)."""
    parts = path.split(".")
    if not all(parts):
        return "a dotted field path like speculation.k"
    for i, part in enumerate(parts):
        model = model_for_path(parts[:i], root)
        if model is None:
            return None if i else "a dotted field path like speculation.k"
        if part not in model.model_fields:
            options = list(model.model_fields)
            close = difflib.get_close_matches(part, options, n=1)
            hint = f" (did you mean {'.'.join(parts[:i] + [close[0]])!r}?)" if close else ""
            return f"a dotted field path; {part!r} is not a field here: allowed {options}{hint}"
    if parts[0] in ("sweep", "name", "description", "output"):
        return f"a field that changes the simulation (not {parts[0]})"
    return None


def _value_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def sweep_rows(sweep: dict, root: type[BaseModel]) -> int:
    """Check a `sweep:` section's shape and count its rows (combinations × replicates) without
    expanding it. Raises ValueError (shown as a `sweep.<path>` error) on a malformed sweep, a
    value given twice, or more than MAX_SWEEP_ROWS rows."""
    if not isinstance(sweep, dict):
        raise field_error("", sweep, "a mapping of swept field paths to lists of values")
    reps = sweep.get("replicates", 1)
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= MAX_SWEEP_ROWS:
        raise field_error("replicates", reps, f"a whole number from 1 to {MAX_SWEEP_ROWS:,}")
    zips = sweep.get("zip", []) or []
    if not isinstance(zips, list) or not all(isinstance(g, list) and len(g) >= 2 for g in zips):
        raise field_error("zip", zips, "a list of groups of >= 2 swept field paths")
    paths = [k for k in sweep if k not in ("replicates", "zip")]
    for key in paths:
        values = sweep[key]
        problem = path_problem(str(key), root)
        if problem:
            raise field_error(str(key), key, f"a swept field: {problem}")
        if not isinstance(values, list) or not values:
            raise field_error(str(key), values, "a non-empty list of values")
    zipped: dict[str, int] = {}
    sizes: list[int] = []
    axes: list[tuple[list[str], list]] = []
    for gi, group in enumerate(zips):
        lengths = set()
        for p in group:
            if not isinstance(p, str) or p not in paths:
                raise field_error("zip", group, f"zip groups name swept paths (one of {paths}); {p!r} is not swept")
            if p in zipped:
                raise field_error("zip", zips, f"each swept path in at most one zip group ({p!r} twice)")
            zipped[p] = gi
            lengths.add(len(sweep[p]))
        if len(lengths) != 1:
            raise field_error("zip", group, f"zipped paths with lists of one length (these have {sorted(lengths)} values)")
        sizes.append(lengths.pop())
        axes.append((list(group), [list(t) for t in zip(*(sweep[p] for p in group))]))
    for p in paths:
        if p not in zipped:
            sizes.append(len(sweep[p]))
            axes.append(([p], sweep[p]))
    for group, values in axes:   # a value (a zip group: a tuple of values) swept twice is a duplicate row
        seen: dict[str, int] = {}
        for i, x in enumerate(values):
            k = _value_key(x)
            if k in seen:
                where = group[0] if len(group) == 1 else "zip"
                raise field_error(where, sweep[group[0]] if len(group) == 1 else group,
                           f"each swept value once ({short_repr(x)} is given twice, at positions {seen[k]} and {i}"
                           f"{'' if len(group) == 1 else ' of the zipped ' + ', '.join(group)})")
            seen[k] = i
    rows = reps
    for n in sizes:
        rows *= n
        if rows > MAX_SWEEP_ROWS:
            break
    if rows > MAX_SWEEP_ROWS:
        total = reps
        for n in sizes:
            total *= n
        raise field_error("", f"{total:,} rows", f"at most {MAX_SWEEP_ROWS:,} rows (combinations × replicates = "
                                          f"{' × '.join(map(str, sizes + [reps]))}); split the sweep or sweep fewer values")
    return rows
