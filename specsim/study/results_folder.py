"""The results folder on disk: preparing it, what specsim owns in it, and reading it back safely.

* `prepare` creates the folder (errors name `--out`), refuses a folder holding results of a
  different scenario unless `force` (a stored resolved.yaml that today's schema reads as this
  scenario, defaults of fields added since filled in, is the same one: `same_scenario`), and with `force` deletes only files specsim wrote there
  (`owned`): a folder with anyone else's files in points/, runs/ or plots/ is refused with their
  names. Files get normal permissions (0644 under umask 022; see atomic.py).
* `load_runs` / `load_points` read runs/*.json and points/*.json back and validate each against
  its schema (`run_problem`, `point_problem`): a file that is not valid JSON, has the wrong
  shape, the wrong key, or (a point) was made from other runs than the plan's is dropped with a
  warning, and recomputed. No stored file is trusted just because it exists.
* `inputs.json` records the content fingerprint of the scenario's inputs (hardware profile,
  catalog entries, length files, specsim version); a rerun whose inputs changed says so (the runs
  themselves are keyed by those fingerprints, so they are recomputed, never reused).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from specsim import atomic
from specsim.errors import SpecError
from specsim.inputs import read_json, read_text
from specsim.scenario import ScenarioError, to_yaml, validate_doc
from specsim.study.plan import PointRuns

__all__ = ["ResultsConflict", "inputs_changes", "load_points", "load_runs", "locked", "owned", "point_problem", "prepare",
           "run_problem", "sha"]

#: Top-level files a run writes.
TOP_FILES = (atomic.MARKER, atomic.LOCK, "resolved.yaml", "inputs.json", "points.csv", "points.parquet", "steps.csv",
             "runs.csv", "timeline.csv", "summary.json", "summary.md", "report.html",
             "per_step.csv")   # `specsim project`'s per-step table (study/project_folder.py)
#: Plot stems (each written as .png and .csv under plots/).
PLOT_STEMS = ("heatmap_e2e_speedup", "speedup_vs_k", "rollout_timeline", "step_breakdown", "capacity_plan",
              "sd_gain_by_lag", "speedup_vs_scale", "heatmap_k_tau", "projection_steps")
_OWNED = {
    "points": re.compile(r"^[0-9a-f]{12}\.json$"),
    "runs": re.compile(r"^[0-9a-f]{16}\.json$"),
    "plots": re.compile(r"^(?:{})\.(?:png|csv)$".format("|".join(PLOT_STEMS))),
    # the best point's ladder, with `output.explain: ladder` (specsim/explain/in_run.py)
    "explain": re.compile(r"^(?:explain\.(?:md|json)|ladder\.csv|shapley\.csv|waterfall\.(?:png|csv)|report\.html"
                          r"|run_ladder\.json)$"),
}
_TEMP = re.compile(r"^\..+\.[^.]+\.tmp$")
#: steady-state figures every stored run has (floats; NaN allowed).
STEADY_KEYS = ("generation_s", "step_s", "exposed_generation_s", "data_s", "reward_s", "logprob_s", "train_s",
               "weight_sync_s", "drafter_update_s", "tau", "mean_alpha", "versions_since_update",
               "mean_active_batch", "token_weighted_batch", "step_setter_tau", "tokens", "verify_steps",
               "throughput_steps_per_h")
META_KEYS = ("mode", "policy", "engines", "rollout_gpus", "training_gpus", "total_gpus", "replicate")


class ResultsConflict(ScenarioError):
    """The output folder cannot take these results (a user error: exit 2)."""


def owned(path: Path, folder: Path) -> bool:
    """Whether `path` (inside `folder`) is a file specsim writes in a results folder."""
    rel = path.relative_to(folder)
    if len(rel.parts) == 1:
        return rel.name in TOP_FILES or bool(_TEMP.match(rel.name))
    if len(rel.parts) == 2 and rel.parts[0] in _OWNED:
        return bool(_OWNED[rel.parts[0]].match(rel.name) or _TEMP.match(rel.name))
    return False


def _foreign(out_dir: Path) -> list[str]:
    bad = []
    for sub in _OWNED:
        d = out_dir / sub
        if not d.is_dir():
            continue
        for p in sorted(d.rglob("*")):
            if p.is_dir() or not owned(p, out_dir):
                bad.append(str(p.relative_to(out_dir)))
    return bad


def _discard(out_dir: Path) -> None:
    """Delete what an earlier run wrote in points/, runs/ and plots/ (only those files)."""
    for sub in _OWNED:
        d = out_dir / sub
        if not d.is_dir():
            continue
        for p in d.iterdir():
            if p.is_file() and owned(p, out_dir):
                p.unlink()
        try:
            d.rmdir()
        except OSError:
            pass


def _out_error(out_dir: Path, exc: OSError) -> ResultsConflict:
    why = exc.strerror or exc.__class__.__name__
    return ResultsConflict(None, "--out", str(out_dir), f"a folder specsim can create and write files in ({why})")


#: output fields that change what a summary shows, never what is simulated or stored in points/ and
#: runs/: a folder whose scenario differs only in them holds this scenario's results
PRESENTATION_FIELDS = ("gpu_hour_usd", "explain")


def _without_presentation(doc: dict) -> dict:
    out = dict(doc)
    if isinstance(out.get("output"), dict):
        out["output"] = {k: v for k, v in out["output"].items() if k not in PRESENTATION_FIELDS}
    return out


@contextlib.contextmanager
def locked(out: str | Path, force: bool) -> Iterator[Path]:
    """The results folder `out` under the one output guard (atomic.output_folder, option `--out`:
    the output-path rule on the resolved path, the marker, the lock held while the block runs);
    either refusal is a ResultsConflict naming --out. `specsim run` and `specsim project` open their
    folders with it."""
    try:
        guard = atomic.output_folder(out, "--out", force=force)
        out_dir = guard.__enter__()
    except SpecError as exc:
        raise ResultsConflict(None, exc.field, exc.value, exc.allowed) from None
    try:
        yield out_dir
    finally:
        guard.__exit__(None, None, None)


def check_out(out: str | Path, force: bool) -> None:
    """`locked`'s output-path rule alone, creating nothing and taking no lock: a command that starts
    work before it opens its folder (`specsim run` starts its worker pool while it plans the study)
    refuses a bad --out first, at no cost. `locked` checks again when it opens the folder."""
    try:
        atomic.output_path(out, "--out", folder=True, force=force, create=False)
    except SpecError as exc:
        raise ResultsConflict(None, exc.field, exc.value, exc.allowed) from None


def same_scenario(old_text: str, resolved_text: str) -> bool:
    """Does a stored resolved.yaml describe this scenario once read by today's schema? A field the
    schema gained since (with its default) is not a different scenario: the stored text is
    validated again, its defaults filled in, and compared as YAML; nor is a change of an output
    field that only changes what the summary shows (PRESENTATION_FIELDS: a price, the explain
    block). Unreadable text is not."""
    try:
        doc = yaml.safe_load(old_text)
        if not isinstance(doc, dict):
            return False
        old = yaml.safe_load(to_yaml(validate_doc(doc)))
        return _without_presentation(old) == _without_presentation(yaml.safe_load(resolved_text))
    except (yaml.YAMLError, ScenarioError, SpecError, ValueError, TypeError):
        return False


def prepare(out_dir: Path, resolved_text: str, force: bool, fresh: bool = False) -> None:
    """Create or reuse `out_dir` for results of the scenario `resolved_text` (see the module doc);
    call it holding the folder's lock (atomic.FolderLock). `fresh` discards every result specsim
    stored there first (`specsim run --fresh`)."""
    try:
        atomic.remove_stale_temporaries(out_dir)  # a run killed mid-write leaves its temp file
        f = out_dir / "resolved.yaml"
        old = read_text(f, "--out", "results file") if f.exists() else None
    except OSError as exc:
        raise _out_error(out_dir, exc) from None
    except SpecError as exc:   # not a regular file, not UTF-8, too large: not this scenario's
        if "regular" in exc.allowed:
            raise ResultsConflict(None, "--out", str(f), f"a results folder whose resolved.yaml is a regular file "
                                  f"({exc.allowed})") from None
        old = ""
    conflict = None
    if fresh:
        _discard(out_dir)
        for name in TOP_FILES:
            if name not in (atomic.MARKER, atomic.LOCK) and (out_dir / name).is_file():
                (out_dir / name).unlink()
        old = None
    elif old is not None and old != resolved_text and not same_scenario(old, resolved_text):
        conflict = (f"a folder of results of this scenario; it holds results of another one (resolved.yaml sha256 "
                    f"{sha(old)[:12]}, this scenario {sha(resolved_text)[:12]}): the scenario or its --set "
                    "overrides changed. Rerun with --fresh (or --force) to discard the old results, or choose another --out")
    elif old is None and ((out_dir / "points").exists() or (out_dir / "runs").exists()):
        conflict = ("a folder of results of this scenario; it has points/ or runs/ but no resolved.yaml, so which "
                    "scenario made them is unknown. Rerun with --fresh (or --force) to discard them, or choose another --out")
    if conflict:
        if not force:
            raise ResultsConflict(None, "--out", str(out_dir), conflict)
        foreign = _foreign(out_dir)
        if foreign:
            shown = ", ".join(foreign[:8]) + (f" and {len(foreign) - 8} more" if len(foreign) > 8 else "")
            raise ResultsConflict(None, "--force", str(out_dir),
                                  f"a folder holding only files specsim wrote; --force deletes only those, and "
                                  f"this one also holds {shown}: move them away or choose another --out")
        _discard(out_dir)
    try:
        atomic.write_text(out_dir / "resolved.yaml", resolved_text)
    except OSError as exc:
        raise _out_error(out_dir, exc) from None


# ============================================================================ reading back
def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_problem(doc, key: str) -> str | None:
    """Why a stored run is unusable (None when it matches the run schema)."""
    if not isinstance(doc, dict):
        return f"a JSON object, got {type(doc).__name__}"
    if doc.get("key") != key:
        return f"key {key!r}, got {doc.get('key')!r}"
    if "error" in doc:
        return None if isinstance(doc["error"], str) and set(doc) == {"key", "error"} else "an error string"
    if "stopped" in doc:   # a run stopped because it could not win (study/store.py)
        stop = doc["stopped"]
        ok = set(doc) == {"key", "stopped"} and isinstance(stop, dict) and all(
            _num(stop.get(k)) for k in ("step", "floor_step_s", "stop_above_s"))
        return None if ok else "a stopped run's step, floor_step_s and stop_above_s"
    steady, steps, meta = doc.get("steady"), doc.get("steps"), doc.get("meta")
    if not isinstance(steady, dict) or not all(_num(steady.get(k)) for k in STEADY_KEYS):
        return f"steady figures {list(STEADY_KEYS)} as numbers"
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) and _num(s.get("step"))
                                                           for s in steps):
        return "a non-empty list of step records"
    if not isinstance(meta, dict) or not all(k in meta for k in META_KEYS) or not _num(meta.get("total_gpus")):
        return f"meta with {list(META_KEYS)}"
    return None


def point_problem(doc, pid: str, runs: PointRuns, cols: list[str]) -> str | None:
    """Why a stored point is unusable: wrong shape, another point, or made from other runs."""
    if not isinstance(doc, dict) or not isinstance(doc.get("row"), dict) or not isinstance(doc.get("steps"), list):
        return "a JSON object with row, steps, point and runs"
    point, row = doc.get("point"), doc["row"]
    if not isinstance(point, dict) or point.get("point_id") != pid or row.get("point_id") != pid:
        return f"point_id {pid!r}"
    if doc.get("runs") != runs.as_dict():
        return "the runs of this scenario's inputs (it was made from other runs: an input changed)"
    missing = [c for c in cols if c not in row]
    if missing:
        return f"a row with every column (missing {missing[:3]})"
    if not all(isinstance(s, dict) for s in doc["steps"]):
        return "step records as objects"
    return None


def _read(folder: Path, pattern: re.Pattern) -> dict[str, tuple[object, str | None]]:
    out: dict[str, tuple[object, str | None]] = {}
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("*.json")):
        if not pattern.match(f.name):
            continue
        if not f.is_file():   # a FIFO or device planted under a result's name: never read, never kept
            try:
                f.unlink()
            except OSError:
                pass
            out[f.stem] = (None, "a regular file (it was a special file: removed)")
            continue
        try:
            out[f.stem] = (read_json(f, "(file)", "stored result"), None)
        except SpecError as exc:   # a FIFO, a device, not UTF-8, not JSON: never trusted, never waited on
            out[f.stem] = (None, f"a readable JSON file ({exc.allowed})")
    return out


def load_runs(runs_dir: Path, warnings: list[str]) -> dict[str, dict]:
    """Valid stored runs by key; each invalid file adds a warning (the run is recomputed)."""
    out = {}
    for key, (doc, err) in _read(runs_dir, _OWNED["runs"]).items():
        err = err or run_problem(doc, key)
        if err:
            warnings.append(f"runs/{key}.json is not a valid run (expected {err}); it is recomputed")
        else:
            out[key] = doc
    return out


def load_points(points_dir: Path, expected: dict[str, PointRuns], cols: list[str],
                warnings: list[str]) -> dict[str, dict]:
    """Valid stored points of this plan by point id; an invalid one adds a warning (recomputed)."""
    out = {}
    for pid, (doc, err) in _read(points_dir, _OWNED["points"]).items():
        if pid not in expected:
            continue
        err = err or point_problem(doc, pid, expected[pid], cols)
        if err:
            warnings.append(f"points/{pid}.json is not a valid point (expected {err}); it is recomputed")
        else:
            out[pid] = doc
    return out


def inputs_changes(out_dir: Path, inputs: dict) -> list[str]:
    """The inputs whose content differs from the last run into this folder (then records these)."""
    f = out_dir / "inputs.json"
    old = None
    try:
        old = read_json(f, "(file)", "stored result") if f.exists() else None
    except SpecError:
        old = None
    changed = []
    if isinstance(old, dict):
        changed = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
    atomic.write_json(f, inputs)
    return changed


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
