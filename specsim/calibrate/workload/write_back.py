"""Write a workload fit's values back: scenario fields (line by line, comments kept, each fitted
line annotated with the command and the rows it was fitted to) and, on request, the fitted
hardware parameters into a profile. The fit itself is specsim/calibrate/workload/fit.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

from specsim import inputs
from specsim.atomic import dump_yaml, write_text
from specsim.calibrate.workload.fit import Applier, FitResult, load_fit_block
from specsim.catalog.hardware import load_hardware
from specsim.errors import SpecError, load_yaml_text
from specsim.scenario import load_scenario
from specsim.validate.targets import resolve_scenario_path


def scenario_updates(path: str | Path, result: FitResult) -> dict[str, dict[str, float]]:
    """scenario file -> {dotted field: value} for every fitted scenario field (not hardware ones)."""
    block = load_fit_block(Path(path))
    vals = result.values()
    out: dict[str, dict[str, float]] = {}
    for stage in block.stages:
        for q in stage.parameters:
            if q.name not in vals or q.path.startswith("hardware."):
                continue
            for s in q.scenarios:
                f = str(resolve_scenario_path(s, Path(path)))
                out.setdefault(f, {})
                if not q.path.endswith((".median", ".sigma")):
                    out[f][q.path] = vals[q.name]
    with tempfile.TemporaryDirectory() as tmp:   # the lognormal pairs, exactly as the fit applied them
        for f, ov in Applier([q for s in block.stages for q in s.parameters], Path(path), Path(tmp)).overrides(vals).items():
            for text in ov:
                k, v = text.split("=", 1)
                if k.endswith((".median", ".p99")):
                    out.setdefault(f, {})[k] = float(v)
    return out


def field_comments(path: str | Path, result: FitResult, command: str) -> dict[str, dict[str, str]]:
    """scenario file -> {field: "fitted by <command> to <row ids>"} for every fitted scenario field."""
    block = load_fit_block(Path(path))
    rows_of: dict[str, list[str]] = {}
    for st in result.stages:
        for r in st.rows:
            for n in r["pins"].split(","):
                rows_of.setdefault(n, []).append(r["target"])
    vals = result.values()
    out: dict[str, dict[str, str]] = {}
    for q in (q for stage in block.stages for q in stage.parameters):
        if q.name not in vals or q.path.startswith("hardware."):
            continue
        rows = ", ".join(dict.fromkeys(rows_of.get(q.name, [])))
        for s in q.scenarios:
            c = out.setdefault(str(resolve_scenario_path(s, Path(path))), {})
            if q.path.endswith(".sigma"):
                c[q.path.rsplit(".", 1)[0] + ".p99"] = (f"median x e^(2.326 sigma), sigma = {vals[q.name]:.3g} "
                                                        f"fitted by `{command}` to {rows}")
                continue
            c[q.path] = f"fitted by `{command}` to {rows}"
            if q.fixed_sigma is not None:
                c[q.path.rsplit(".", 1)[0] + ".p99"] = (f"median x e^(2.326 sigma), sigma = {q.fixed_sigma} "
                                                        "fixed (prior, calibration/README.md)")
    return out


def rewrite_yaml_fields(text: str, changes: dict[str, float], comment: str | dict[str, str]) -> str:
    """Replace block-style `key: value` lines addressed by dotted paths, keeping every other line
    and adding `# <comment>`. Raises SpecError when a path is not a block-style scalar line."""
    lines = text.splitlines(keepends=True)
    for dotted, value in changes.items():
        parts = dotted.split(".")
        stack: list[tuple[int, str]] = []
        hit = None
        for i, line in enumerate(lines):
            s = line.lstrip(" ")
            if not s.strip() or s.startswith("#") or ":" not in s:
                continue
            indent = len(line) - len(s)
            key = s.split(":", 1)[0].strip()
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key))
            if [k for _, k in stack] == parts:
                hit = i
                break
        if hit is None:
            raise SpecError(dotted, value, "a block-style `key: value` line in the scenario to rewrite")
        line = lines[hit]
        indent = len(line) - len(line.lstrip(" "))
        v = round(value) if parts[-1] in ("median", "p99") else float(f"{value:.4g}")
        note = comment.get(dotted, "") if isinstance(comment, dict) else comment
        lines[hit] = f"{' ' * indent}{parts[-1]}: {v}" + (f"   # {note}" if note else "") + "\n"
    return "".join(lines)


def write_scenarios(path: str | Path, result: FitResult, comment: str | dict[str, dict[str, str]]) -> list[str]:
    """Write every fitted scenario field into its scenario file (atomically), each with its comment
    (one string, or per scenario file and field); returns the files."""

    written = []
    for f, changes in scenario_updates(path, result).items():
        text = inputs.read_text(f, "(file)", "scenario YAML file")
        write_text(Path(f), rewrite_yaml_fields(text, changes, comment.get(f, {}) if isinstance(comment, dict) else comment))
        load_scenario(f)   # the written file still loads
        written.append(f)
    return written


def write_profile_values(path: str | Path, result: FitResult, profile: str | Path, command: str,
                         names: set[str] | None = None) -> dict[str, float]:
    """Write the fitted `hardware.<block>.<key>` parameters (those in `names`: the parameters whose
    scenarios run on this profile; None: all) into a profile YAML as
    `{value: V, source: "fitted by <command> to <rows>"}` (the document is loaded, changed and dumped,
    so flow- and block-style profiles both work; a leading comment header is kept). Returns {block.key: value}."""

    block_doc = load_fit_block(Path(path))
    vals = result.values()
    rows_of = {n: [r["target"] for st in result.stages for r in st.rows if n in r["pins"].split(",")]
               for n in vals}
    text = inputs.read_text(profile, "hardware", "hardware profile YAML")
    header = "".join(ln for ln in text.splitlines(keepends=True)[:50] if ln.startswith("#"))
    doc = load_yaml_text(text)
    done: dict[str, float] = {}
    for q in (q for st in block_doc.stages for q in st.parameters):
        if q.name not in vals or not q.path.startswith("hardware.") or (names is not None and q.name not in names):
            continue
        block, key = q.path.removeprefix("hardware.").split(".", 1)
        section = doc.get(block) or {}
        doc[block] = section
        section[key] = {"value": float(f"{vals[q.name]:.4g}"),
                        "source": f"fitted by `{command}` to {', '.join(rows_of[q.name])}"}
        done[f"{block}.{key}"] = float(f"{vals[q.name]:.4g}")
    if done:
        write_text(Path(profile), header + dump_yaml(doc, sort_keys=False, allow_unicode=True, width=120))
        load_hardware(str(profile))   # the written profile still loads
    return done
