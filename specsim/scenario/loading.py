"""Loading scenarios: YAML files (the bounded safe loader of specsim.errors), `--set path=value`
overrides on dotted paths, pydantic errors turned into one `ScenarioError` naming file, field,
value and what is allowed, and the checks that need a whole scenario (baseline, swept values)."""

from __future__ import annotations

import copy
import difflib
import json
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from specsim import inputs
from specsim.atomic import dump_yaml
from specsim.errors import SpecError, YamlTooLarge, load_yaml_text, short_repr
from specsim.scenario.base import SEP, Raw, ScenarioError
from specsim.scenario.paths import model_for_path
from specsim.scenario.schema import Scenario
from specsim.workload.acceptance.engine_metrics import read_acceptance_metrics


def parse_override(text: str) -> tuple[str, Any]:
    """`path=value` → (path, YAML-parsed value)."""
    if "=" not in text:
        raise ScenarioError(None, "--set", text, "expected path=value, e.g. speculation.k=3")
    path, raw = text.split("=", 1)
    path = path.strip()
    try:
        value = load_yaml_text(raw) if raw.strip() else ""
    except YamlTooLarge as exc:
        raise ScenarioError(None, "--set", path, f"a plain value: {exc}") from None
    except yaml.YAMLError:
        value = raw
    return path, value


def set_dotted(doc: dict, path: str, value: Any, file: str | None = None) -> dict:
    """Set `a.b.c` in a nested dict (copying), checking every part names a real field.

    Under `sweep` the rest of the path is one key, the swept field's own dotted path:
    `sweep.speculation.k=[0, 3]` sets the sweep entry `speculation.k` (and `sweep.replicates=1`
    its replicate count); the sweep validator then checks the path names a real field."""
    parts = path.split(".")
    if not all(parts):
        raise ScenarioError(file, path, path, "a dotted field path like speculation.k")
    out = copy.deepcopy(doc)
    if parts[0] == "sweep" and len(parts) > 1:
        sweep = out.get("sweep")
        out["sweep"] = {**(sweep if isinstance(sweep, dict) else {}), ".".join(parts[1:]): value}
        return out
    cur = out
    for i, part in enumerate(parts):
        model = model_for_path(parts[:i], Scenario)
        if model is not None and part not in model.model_fields:
            options = list(model.model_fields)
            close = difflib.get_close_matches(part, options, n=1)
            hint = f" (did you mean {'.'.join(parts[:i] + [close[0]])!r}?)" if close else ""
            raise ScenarioError(file, path, value, f"unknown field {part!r}; allowed here: {options}{hint}")
        if i == len(parts) - 1:
            cur[part] = value
        else:
            nxt = cur.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                cur[part] = nxt
            cur = nxt
    return out


def _allowed_from_error(err: dict) -> str:
    typ = err.get("type", "")
    ctx = err.get("ctx") or {}
    if typ == "extra_forbidden":
        loc = [str(p) for p in err["loc"][:-1]]
        model = model_for_path(loc, Scenario)
        options = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(err["loc"][-1]), options, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field; allowed here: {options}{hint}"
    if typ == "missing":
        return "required field is missing"
    if typ == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if typ in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        sym = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[typ]
        bound = next(iter(ctx.values()), "")
        return f"must be {sym} {bound}"
    if typ.startswith(("int_", "float_", "bool_", "string_", "dict_", "list_", "model_")):
        return err.get("msg", "wrong type").replace("Input should be", "must be")
    msg = str(err.get("msg", ""))
    return msg.removeprefix("Value error, ")


def _format_validation(exc: ValidationError, file: str | None) -> ScenarioError:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not str(p).startswith(("function-after", "function-before"))]
    field = ".".join(loc) or "(scenario)"
    value = err.get("input")
    if isinstance(value, dict) and err.get("type") != "extra_forbidden":
        value = "{...}" if len(short_repr(value, 100)) > 80 else value
    more = len(exc.errors()) - 1
    allowed = _allowed_from_error(err)
    if SEP in allowed:
        _, sub, val, allowed = allowed.split(SEP, 3)
        field = (".".join(loc + [sub]) if not sub.startswith("training.") else sub) if sub else ".".join(loc)
        value = Raw(val)
    if more:
        allowed += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ScenarioError(file, field, value, allowed)


def read_yaml(path: str | Path) -> dict:
    """The scenario file's mapping, read through the guarded reader (specsim.inputs: a regular
    file, bounded, UTF-8, unique keys); every problem is a ScenarioError naming the file."""
    file = str(path)
    try:
        doc = inputs.read_yaml(path, "(file)", "scenario YAML file")
    except SpecError as exc:
        raise ScenarioError(file, "(file)", exc.value, exc.allowed) from None
    if not isinstance(doc, dict):
        raise ScenarioError(file, "(scenario)", doc, "a YAML mapping with sections hardware, model, rollout, workload, drafter, ...")
    return doc


def tau_from_metrics(doc: dict, file: str | None) -> dict:
    """`drafter.tau_from`: read the engine's spec-decode metrics (relative to the scenario file when
    the file is there) and set `drafter.tau` to the τ they report and `drafter.tau_at_k` to their
    draft length (workload/acceptance/engine_metrics.py). A `tau` or `tau_at_k` given beside it must
    agree; `alpha` cannot be given with it. Re-validating a loaded scenario re-reads the file and
    finds the same values (a sweep over `drafter.tau_from` reads each file)."""
    d = doc.get("drafter")
    if not isinstance(d, dict) or not isinstance(d.get("tau_from"), str) or not d["tau_from"]:
        return doc

    src = d["tau_from"]
    path = Path(src).expanduser()
    if not path.is_absolute() and file is not None and (Path(file).parent / path).exists():
        path = Path(file).parent / path
    try:
        m = read_acceptance_metrics(path, "drafter.tau_from")
    except SpecError as exc:
        raise ScenarioError(exc.where or file, "drafter.tau_from", src if exc.value == str(path) else exc.value,
                            f"must be {exc.allowed}") from None
    if d.get("alpha") is not None:
        raise ScenarioError(file, "drafter.alpha", d["alpha"], "omitted with drafter.tau_from (it gives tau)")
    if d.get("tau") is not None and d["tau"] != m.tau:
        raise ScenarioError(file, "drafter.tau", d["tau"], f"omitted with drafter.tau_from ({src} gives tau = "
                                                           f"{m.tau:.6g}; give one or the other)")
    out = dict(d, tau=m.tau)
    if m.k is not None:
        if d.get("tau_at_k") is not None and d["tau_at_k"] != m.k:
            raise ScenarioError(file, "drafter.tau_at_k", d["tau_at_k"],
                                f"omitted or {m.k} with drafter.tau_from ({src} has {m.k} draft tokens per draft)")
        out["tau_at_k"] = m.k
    elif d.get("tau_at_k") is None:
        raise ScenarioError(file, "drafter.tau_at_k", "<not given>", f"given with drafter.tau_from: {src} holds {m.engine}'s "
                                                            "accept length, which carries no draft length")
    return {**doc, "drafter": out}


def validate_doc(doc: dict, file: str | None = None) -> Scenario:
    doc = tau_from_metrics(doc, file)
    try:
        sc = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise _format_validation(exc, file) from None
    except (RecursionError, OverflowError, TypeError) as exc:
        raise ScenarioError(file, "(scenario)", "<value>", f"plain YAML values ({exc.__class__.__name__})") from None
    _check_numbers(sc, file)
    return sc


def _check_numbers(sc: Scenario, file: str | None) -> None:
    def walk(obj, prefix):
        if isinstance(obj, BaseModel):
            for name in type(obj).model_fields:
                walk(getattr(obj, name), f"{prefix}.{name}" if prefix else name)
        elif isinstance(obj, float) and not math.isfinite(obj):
            raise ScenarioError(file, prefix, obj, "must be a finite number")
    walk(sc, "")


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Load, apply `--set path=value` overrides, validate (with the baseline overrides and every
    swept value). Raises ScenarioError."""
    file = str(path)
    doc = read_yaml(path)
    set_values = {}
    for text in overrides:
        key, value = parse_override(text)
        doc = set_dotted(doc, key, value, file)
        set_values[key] = value
    sc = validate_doc(doc, file)
    sc._source_file = file
    _refuse_swept_sets(sc, set_values)
    check_derived(sc)
    return sc


def _refuse_swept_sets(sc: Scenario, set_values: dict) -> None:
    """A `--set` on a field the sweep varies would be overridden at every point without a word:
    refuse it, and say how to set the swept values instead."""
    swept = [k for k in sc.sweep if k not in ("replicates", "zip")]
    for key, value in set_values.items():
        for path in swept:
            if key == path or key.startswith(path + ".") or path.startswith(key + "."):
                raise ScenarioError(
                    "command line", f"--set {key}", value,
                    f"a field the sweep does not vary: the sweep sets {path} at every point "
                    f"(sweep.{path} = {sc.sweep[path]}); change the swept values with --set 'sweep.{path}=[...]', "
                    f"or drop the sweep with --set 'sweep={{}}'")


def _axes(sweep: dict) -> list[list[dict]]:
    """The sweep's independent axes: each a list of {path: value} changes (a zip group's values
    change together)."""
    paths = [k for k in sweep if k not in ("replicates", "zip")]
    zips = [list(g) for g in (sweep.get("zip") or [])]
    zipped = {p for g in zips for p in g}
    axes = [[dict(zip(g, vals)) for vals in zip(*(sweep[p] for p in g))] for g in zips]
    return axes + [[{p: v} for v in sweep[p]] for p in paths if p not in zipped]


def check_derived(sc: Scenario) -> None:
    """What `run` would refuse later, refused now (so `check` refuses it too): the baseline
    overrides must give a valid scenario, and every swept value must give one — on its own, or
    (values valid only together with another axis's, like drafter.alpha with drafter.tau: null)
    in the first full point that holds it. Errors name `pipeline.baseline` or `sweep.<path>`.
    Every other combination is checked by the run's planning (`runner.check_points`), also
    naming `sweep`."""
    file = source_file(sc)
    try:
        apply_overrides(sc, dict(sc.pipeline.baseline))
    except ScenarioError as exc:
        raise ScenarioError(file, "pipeline.baseline", exc.value,
                            f"overrides giving a valid baseline scenario: {exc.field}: {exc.allowed}") from None
    axes = _axes(sc.sweep)
    for i, axis in enumerate(axes):
        seen: dict[str, int] = {}   # each swept value once *after* conversion: [3, 3.0, "3"] is one value
        for pos, change in enumerate(axis):
            try:
                _once(apply_overrides(sc, change), change, seen, pos, file)
                continue
            except ScenarioError as alone:
                if alone.field.startswith("sweep."):
                    raise
                first: dict = {}
                for j, other in enumerate(axes):
                    first.update(change if j == i else other[0])
                try:
                    _once(apply_overrides(sc, first), change, seen, pos, file)
                    continue
                except ScenarioError as together:
                    if together.field.startswith("sweep."):
                        raise
                    exc = alone
            path, value = next(iter(change.items())) if len(change) == 1 else ("zip", change)
            where = "" if exc.field == path else f" ({exc.field})"
            raise ScenarioError(file, f"sweep.{path}", value, f"swept values that give a valid "
                                                             f"scenario{where}: {exc.allowed}") from None


def _at(doc: Any, path: str) -> Any:
    for part in path.split("."):
        doc = doc.get(part) if isinstance(doc, dict) else None
    return doc


def _once(new: Scenario, change: dict, seen: dict[str, int], pos: int, file: str | None) -> None:
    """Refuse a swept value equal, after the schema converted it, to one swept before it."""
    dumped = new.model_dump(mode="json")
    key = json.dumps({p: _at(dumped, p) for p in change}, sort_keys=True, default=str)
    if key in seen:
        path, value = next(iter(change.items())) if len(change) == 1 else ("zip", change)
        raise ScenarioError(file, f"sweep.{path}", value, f"each swept value once after conversion to the "
                            f"field's type (positions {seen[key]} and {pos} are the same value, "
                            f"{short_repr(_at(dumped, next(iter(change))))})")
    seen[key] = pos


def ignored_fields(sc: Scenario) -> list[str]:
    """Warnings for fields the user wrote (or swept) that the scenario's mode does not use: they
    are never dropped silently. (Warnings, not errors: a sweep over the mode may need them.)"""
    out = []
    swept = set(sc.sweep) - {"replicates", "zip"}
    given_lag = "policy_lag" in sc.pipeline.model_fields_set or "pipeline.policy_lag" in swept
    if sc.pipeline.mode == "sync" and given_lag and "pipeline.mode" not in swept:
        out.append("pipeline.policy_lag is ignored: it applies to pipeline.mode async only (sync steps use the "
                   "current policy)")
    given_gtau = "general_tau" in sc.drafter.model_fields_set or "drafter.general_tau" in swept
    if sc.drafter.init == "in_domain" and sc.drafter.general_tau is not None or (
            given_gtau and sc.drafter.init == "in_domain" and "drafter.init" not in swept):
        out.append("drafter.general_tau is ignored: it applies to drafter.init general only (set init: general, "
                   "or remove it)")
    return out


def source_file(sc: Scenario) -> str | None:
    """The file a scenario was loaded from (for error messages and relative paths)."""
    return sc._source_file


def apply_overrides(sc: Scenario, changes: dict[str, Any]) -> Scenario:
    """A new scenario with dotted-path changes applied and re-validated."""
    file = source_file(sc)
    doc = sc.model_dump(mode="python")
    for key, value in changes.items():
        doc = set_dotted(doc, key, value, file)
    new = validate_doc(doc, file)
    new._source_file = file
    return new


def to_yaml(sc: Scenario) -> str:
    return dump_yaml(sc.model_dump(mode="json"), sort_keys=False)


def spec_error_to_scenario(exc: SpecError, file: str | None) -> ScenarioError:
    return ScenarioError(file or exc.where, exc.field, exc.value, f"must be {exc.allowed}")
