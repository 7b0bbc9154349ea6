"""Sweeps: expand a scenario's `sweep:` section into points, run them, one tidy row per point.

Expansion. `sweep:` maps dotted field paths to lists of values. Every path varies independently
(cartesian product, the first path varying slowest) except the paths of one `zip` group, which
vary together (their lists must have the same length). `replicates: R` runs every combination R
times with replicate index 0..R-1; the common-random-number draws derive from (seed, replicate,
step) inside `draw_step`, so replicate r of every point — and of its baselines — sees the same
responses. A point is a dict of swept values plus its replicate; `point_id` is a stable hash of
the two (12 hex digits) that names the point's result file.

Runs. Everything simulated is a *run*: one `run_pipeline` of one scenario at one replicate. Runs
are keyed by `run_key` — a hash of the scenario with everything that cannot change the simulation
normalised away (name, description, sweep, output, the baseline overrides; the draft-length knobs
when SD is off; the policy lag when the pipeline is sync) — so a point that *is* its baseline (k=0
in a sync scenario) and every point sharing a baseline reuse one run: baselines are computed once
per (baseline scenario, replicate), never per point. The key also holds the *content* of every
input the scenario names (`inputs_fingerprint`: the hardware profile file, the model's and the
drafter's catalog entries, empirical length files, the specsim version), so editing any of them
gives new keys and a resumed folder recomputes instead of reusing stale runs. Runs execute in
:mod:`specsim.study.executors`.

Rows. `point_row` turns a point's run plus its baseline run and its sync-AR run into one flat
dict: every swept field, replicate, seed, steady-state stage times, speedups vs the baseline and
vs synchronous autoregressive decoding on the same GPUs (the reference every point of a sweep can
be compared with: for an async scenario whose baseline is async AR, sync AR is computed too), and
cost figures (GPU-hours per step, tokens/s per GPU).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import specsim
from specsim import inputs
from specsim.catalog import models
from specsim.catalog.hardware import resolve_profile_path
from specsim.errors import SpecError
from specsim.policy import POLICY_FIELDS, policy_class
from specsim.scenario import Scenario, ScenarioError, apply_overrides, source_file
from specsim.study.comparison import baseline_scenario

RESERVED = ("replicates", "zip")
STAGES = ("data_s", "reward_s", "logprob_s", "train_s", "weight_sync_s", "drafter_update_s")
#: What turns a point into synchronous autoregressive decoding (plus, for an async point, moving
#: the training pool's GPUs into the colocated pool: same total GPUs).
SYNC_AR = {"pipeline.mode": "sync", "speculation.policy": "off"}


# ============================================================================ expansion
@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: `values` (dotted path → value) at replicate `replicate`.
    `index` is the combination's position in sweep order (shared by its replicates)."""

    index: int
    values: dict
    replicate: int
    point_id: str

    def label(self) -> str:
        parts = [f"{k}={_fmt_value(v)}" for k, v in self.values.items()]
        return ", ".join(parts + [f"replicate={self.replicate}"]) if parts else f"replicate={self.replicate}"

    def as_dict(self) -> dict:
        return {"point": self.index, "point_id": self.point_id, "replicate": self.replicate, "values": dict(self.values)}


def _fmt_value(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True)


def point_id(values: dict, replicate: int) -> str:
    """Stable 12-hex-digit id of (swept values, replicate); independent of dict order."""
    return hashlib.sha256(_canonical({"values": values, "replicate": int(replicate)}).encode()).hexdigest()[:12]


def swept_paths(sc: Scenario) -> list[str]:
    """The swept field paths in sweep order (without `replicates` / `zip`)."""
    return [k for k in sc.sweep if k not in RESERVED]


def replicates(sc: Scenario) -> int:
    return int(sc.sweep.get("replicates", 1))


def _groups(sc: Scenario) -> list[list[str]]:
    """Paths grouped for expansion: each zip group is one group; every other path its own."""
    file = source_file(sc)
    paths = swept_paths(sc)
    zips = sc.sweep.get("zip", []) or []
    group_of: dict[str, int] = {}
    for gi, group in enumerate(zips):
        for p in group:
            if not isinstance(p, str) or p not in paths:
                raise ScenarioError(file, "sweep.zip", group,
                                    f"zip groups name swept paths (one of {paths}); {p!r} is not swept")
            if p in group_of:
                raise ScenarioError(file, "sweep.zip", zips, f"each swept path in at most one zip group ({p!r} twice)")
            group_of[p] = gi
        lengths = {p: len(sc.sweep[p]) for p in group}
        if len(set(lengths.values())) != 1:
            raise ScenarioError(file, "sweep.zip", group, f"zipped paths need lists of one length, got {lengths}")
    groups: list[list[str]] = []
    seen: set[int] = set()
    for p in paths:
        gi = group_of.get(p)
        if gi is None:
            groups.append([p])
        elif gi not in seen:
            seen.add(gi)
            groups.append(list(zips[gi]))
    return groups


def combinations(sc: Scenario) -> list[dict]:
    """The swept value combinations (without replicates), in sweep order."""
    groups = _groups(sc)
    axes = [list(zip(*(sc.sweep[p] for p in g))) for g in groups]
    out = []
    for combo in itertools.product(*axes):
        values: dict = {}
        for g, vals in zip(groups, combo):
            values.update(dict(zip(g, vals)))
        out.append({p: values[p] for p in swept_paths(sc)})
    return out or [{}]


def expand(sc: Scenario) -> list[SweepPoint]:
    """Every point × replicate, ordered by point then replicate. No sweep → one point."""
    reps = replicates(sc)
    return [SweepPoint(i, values, r, point_id(values, r))
            for i, values in enumerate(combinations(sc)) for r in range(reps)]


def point_scenario(sc: Scenario, point: SweepPoint) -> Scenario:
    """The scenario of one point: the swept values applied (raises ScenarioError naming the path)."""
    if not point.values:
        return sc
    return apply_overrides(sc, point.values)


# ============================================================================ runs and their keys
def run_doc(sc: Scenario) -> dict:
    """The scenario as a dict with everything that cannot change the simulation normalised away."""
    doc = sc.model_dump(mode="json")
    for key in ("name", "description", "sweep", "output", "plan"):
        doc.pop(key, None)
    doc["pipeline"].pop("baseline", None)
    spec = doc["speculation"]
    policy = policy_class(spec["policy"])
    if not policy.speculates(spec):
        doc["speculation"] = spec = {"policy": "off"}
    for name in POLICY_FIELDS:                  # the other policies' fields cannot change this run
        if name not in policy.fields:
            spec.pop(name, None)
    if spec.get("acceptance_estimate", "drafter") == "drafter":   # the default: run keys as before
        spec.pop("acceptance_estimate", None)
    if doc["pipeline"]["mode"] == "sync":
        doc["pipeline"].pop("policy_lag", None)
        doc["pipeline"].pop("partial_rollouts", None)
        doc["pipeline"].pop("max_groups_in_flight", None)
    if doc["pipeline"].get("max_groups_in_flight", 0) is None:   # the default: run keys as before
        doc["pipeline"].pop("max_groups_in_flight")
    if not sc.what_ifs:                                    # no counterfactual: run keys as before
        doc.pop("what_if", None)
    d = doc["drafter"]
    if d.get("spread_scope", "between") == "between":     # the default scope: run keys as before
        for key in ("spread_scope", "spread_segment_tokens", "spread_segment_correlation"):
            d.pop(key, None)
    return doc


def run_key(sc: Scenario, replicate: int, engine: str = "fast") -> str:
    """Stable 16-hex-digit key of one pipeline run."""
    payload = {"scenario": run_doc(sc), "replicate": int(replicate), "engine": engine,
               "inputs": inputs_fingerprint(sc)}
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()[:16]


def inputs_fingerprint(sc: Scenario) -> dict:
    """sha256 (12 hex digits) of the content of every input outside the scenario text: the
    hardware profile file (the rollout pool's; with mixed pools the trainer's too, `training_hardware`), the model's catalog entry, the drafter's architecture, each empirical
    length file; plus the specsim version. An input that cannot be read is marked (resolve
    reports it properly)."""
    out: dict[str, Any] = {"specsim": specsim.__version__}
    pools = [("hardware", sc.rollout_hardware)] + ([("training_hardware", sc.training_hardware)]
                                                   if sc.mixed_hardware else [])
    for key, name in pools:   # the rollout pool's profile; the trainer's too when it is another
        try:
            out[key] = _file_sha(str(resolve_profile_path(name)))
        except (SpecError, OSError):
            out[key] = f"unreadable:{name}"
    base = Path(source_file(sc)).parent if source_file(sc) else None
    try:
        target = models.load_model(sc.model, base)
        out["model"] = _sha12(repr(target))
        d = sc.drafter
        out["drafter"] = _sha12(repr(models.drafter_arch(d.kind, target, d.draft_vocab, d.draft_ffn)))
    except (SpecError, KeyError, TypeError, ValueError):
        out["model"] = f"unknown:{sc.model}"
    for name in ("response_tokens", "prompt_tokens"):
        spec = getattr(sc.workload, name)
        if spec.kind == "empirical" and spec.path:
            path = Path(spec.path)   # both places resolve may look it up: as given, and by the scenario
            places = [path] if path.is_absolute() or base is None else [path, base / path]
            out[f"workload.{name}"] = "+".join(_file_sha(str(q)) for q in places if q.exists()) or "missing"
    return out


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _file_sha(path: str) -> str:
    p = Path(path)
    try:
        st = p.stat()
        return _file_sha_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)
    except (OSError, SpecError):
        return f"unreadable:{path}"


@lru_cache(maxsize=256)
def _file_sha_cached(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(inputs.read_bytes(path, "(file)", "input file")).hexdigest()[:12]


@dataclass(frozen=True)
class RunTask:
    """A pipeline run to execute somewhere: picklable (plain data only)."""

    key: str
    doc: dict
    file: str | None
    replicate: int
    engine: str = "fast"
    role: str = "point"     # point | baseline | sync_ar | capacity (informational)
    #: stop the run once its steady mean step is provably above this (sim/pipeline.run_pipeline):
    #: a planner's run that cannot win; not part of the key (a run it does not stop is the same run)
    stop_above_s: float | None = None

    @classmethod
    def of(cls, sc: Scenario, replicate: int, role: str, engine: str = "fast") -> RunTask:
        return cls(run_key(sc, replicate, engine), sc.model_dump(mode="json"), source_file(sc), int(replicate),
                   engine, role)


# ============================================================================ baselines
def is_sync_ar(sc: Scenario) -> bool:
    return sc.pipeline.mode == "sync" and is_ar(sc)


def is_ar(sc: Scenario) -> bool:
    """The point never drafts (policy off, or a policy whose fields draft nothing: always at k 0)."""
    return not policy_class(sc.speculation.policy).speculates(sc.speculation.model_dump())


def baseline_of(sc: Scenario) -> Scenario:
    return baseline_scenario(sc)


def sync_ar_of(sc: Scenario) -> Scenario:
    """Synchronous AR on the point's total GPUs: the point's baseline when that already is sync
    AR, else the point with SYNC_AR applied (an async point's training GPUs join the colocated
    pool, rounded down to whole rollout engines; a mixed-pool point's all on the rollout profile,
    `colocated_hardware`)."""
    base = baseline_of(sc)
    if is_sync_ar(base):
        return base
    changes: dict[str, Any] = dict(SYNC_AR)
    if sc.pipeline.mode == "async":
        r = sc.rollout
        engine = max(r.tp, r.ep) * r.pp
        changes["training.gpus"] = None
        changes["rollout.gpus"] = max(engine, (sc.total_gpus // engine) * engine)
    changes.update(colocated_hardware(sc))
    return apply_overrides(sc, changes)


def colocated_hardware(sc: Scenario) -> dict[str, Any]:
    """The overrides that put a mixed-pool point's colocated counterpart on one profile: the
    rollout pool's (`rollout.hardware`), as the same count of GPUs; nothing for one profile."""
    if not sc.mixed_hardware:
        return {}
    return {"hardware": sc.rollout_hardware, "rollout.hardware": None, "training.hardware": None}


# ============================================================================ rows
def k_of(sc: Scenario) -> int:
    """The draft length in use: 0 for AR, else the largest the policy drafts (k_max for adaptive)."""
    if is_ar(sc):
        return 0
    return getattr(sc.speculation, policy_class(sc.speculation.policy).k_field)


def _ratio(num: float | None, den: float | None) -> float:
    if num is None or den is None or not (den > 0) or not math.isfinite(num) or not math.isfinite(den):
        return float("nan")
    return float(num) / float(den)


def trainer_idle_share(mode: str, steady: dict) -> float:
    """Async: the share of the steady step the trainer waits for rollouts (exposed generation ÷
    step). Near 0 the pipeline is trainer-bound (more rollout GPUs or a faster rollout cannot
    shorten the step; the trainer pool can); clearly above 0 it is generation-bound. Sync: NaN
    (one colocated pool: generation is a stage, not a wait)."""
    if mode != "async":
        return float("nan")
    return _ratio(steady["exposed_generation_s"], steady["step_s"])


#: short names of the dotted fields the main sweeps vary, as `specsim explain --point` takes them
POINT_ALIASES = {"k": "speculation.k", "lag": "pipeline.policy_lag", "tau": "drafter.tau",
                 "gpus": "rollout.gpus", "policy": "speculation.policy"}

#: The columns of a point row after the identity columns and the swept paths, in order.
ROW_COLUMNS = (
    "scenario", "model", "hardware", "mode", "sd_policy", "k", "policy_lag", "drafter", "rollout_gpus",
    "training_gpus", "total_gpus", "engines", "generation_s", "step_s", *STAGES, "exposed_generation_s",
    "trainer_idle_share", "generation_share", "tau", "step_setter_tau", "mean_alpha", "versions_since_update", "mean_active_batch", "tokens_per_step",
    "verify_steps", "baseline_generation_s", "baseline_step_s", "baseline_exposed_generation_s",
    "generation_speedup", "e2e_speedup", "exposed_generation_saving_s", "sync_ar_generation_s", "sync_ar_step_s",
    "generation_speedup_vs_sync_ar", "e2e_speedup_vs_sync_ar", "gpu_hours_per_step", "tokens_per_s_per_gpu",
    "generation_tokens_per_s_per_gpu", "throughput_steps_per_h", "token_weighted_batch", "per_token_sd_gain",
    "sync_ar_generation_share", "trainer_s", "trainer_cap", "trainer_bound", "what_if",
)
#: a point whose E2E speedup reaches this share of its trainer cap is flagged trainer-bound
TRAINER_CAP_SHARE = 0.9
ID_COLUMNS = ("point", "point_id", "replicate", "seed")


def row_columns(swept: list[str]) -> list[str]:
    """The stable column order of points.csv: identity, swept paths (sweep order), then ROW_COLUMNS."""
    return list(ID_COLUMNS) + [p for p in swept if p not in ID_COLUMNS and p not in ROW_COLUMNS] + list(ROW_COLUMNS)


def point_row(point: SweepPoint, sc: Scenario, run: dict, baseline: dict, sync_ar: dict | None) -> dict:
    """One tidy row: swept values, identity, steady stage times, speedups and cost figures."""
    s = run["steady"]
    b = baseline["steady"]
    a = sync_ar["steady"] if sync_ar and "steady" in sync_ar else None
    # generation time per step: async continuous generation reports the pool's time per step
    # (gen_window_s, finish to finish; sync: = generation_s) — its generation_s is release-to-finish latency
    gw = lambda d: d.get("gen_window_s", d["generation_s"])
    meta = run["meta"]
    total = meta["total_gpus"]
    trainer_s = sum(s.get(st, 0.0) for st in ("reward_s", "logprob_s", "train_s", "weight_sync_s", "drafter_update_s"))
    row: dict[str, Any] = {"point": point.index, "point_id": point.point_id, "replicate": point.replicate,
                           "seed": sc.seed}
    for path, value in point.values.items():
        row[path] = value
    row.update({
        "scenario": sc.name, "model": sc.model, "hardware": sc.hardware_label, "mode": sc.pipeline.mode,
        "sd_policy": meta["policy"], "k": k_of(sc), "policy_lag": sc.pipeline.policy_lag if sc.pipeline.mode == "async" else 0,
        "drafter": sc.drafter.kind, "rollout_gpus": meta["rollout_gpus"], "training_gpus": meta["training_gpus"],
        "total_gpus": total, "engines": meta["engines"],
        "generation_s": s["generation_s"], "step_s": s["step_s"],
    })
    for st in STAGES:
        row[st] = s[st]
    row.update({
        "exposed_generation_s": s["exposed_generation_s"],
        "trainer_idle_share": trainer_idle_share(sc.pipeline.mode, s),
        "generation_share": _ratio(gw(s), s["step_s"]),
        # τ over every trajectory, and τ of the response(s) that finished last in each step (set its generation end)
        "tau": s["tau"], "step_setter_tau": s.get("step_setter_tau", float("nan")), "mean_alpha": s["mean_alpha"], "versions_since_update": s["versions_since_update"],
        "mean_active_batch": s["mean_active_batch"], "tokens_per_step": s["tokens"], "verify_steps": s["verify_steps"],
        "baseline_generation_s": b["generation_s"], "baseline_step_s": b["step_s"],
        "baseline_exposed_generation_s": b["exposed_generation_s"],
        "generation_speedup": _ratio(gw(b), gw(s)),
        "e2e_speedup": _ratio(b["step_s"], s["step_s"]),
        "exposed_generation_saving_s": b["exposed_generation_s"] - s["exposed_generation_s"],
        "sync_ar_generation_s": a["generation_s"] if a else float("nan"),
        "sync_ar_step_s": a["step_s"] if a else float("nan"),
        "generation_speedup_vs_sync_ar": _ratio(gw(a), gw(s)) if a else float("nan"),
        "e2e_speedup_vs_sync_ar": _ratio(a["step_s"], s["step_s"]) if a else float("nan"),
        "gpu_hours_per_step": total * s["step_s"] / 3600.0,
        "tokens_per_s_per_gpu": _ratio(s["tokens"], s["step_s"] * total),
        "generation_tokens_per_s_per_gpu": _ratio(s["tokens"], gw(s) * meta["rollout_gpus"]),
        "throughput_steps_per_h": s["throughput_steps_per_h"],
        # the active batch a generated token saw and τ × decode ÷ SD step there (cost table)
        "token_weighted_batch": s.get("token_weighted_batch", float("nan")),
        "per_token_sd_gain": s.get("per_token_sd_gain", float("nan")),
        "sync_ar_generation_share": _ratio(a["generation_s"], a["step_s"]) if a else float("nan"),
        "trainer_s": trainer_s,
        # the largest E2E speedup free generation could give: the baseline's step ÷ the point's trainer side
        "trainer_cap": _ratio(b["step_s"], trainer_s),
        "trainer_bound": bool(_ratio(b["step_s"], s["step_s"]) >= TRAINER_CAP_SHARE * _ratio(b["step_s"], trainer_s)),
        # a counterfactual point (scenario `what_if:`) says so in every row: ';'-joined fields, '' = a prediction
        "what_if": ";".join(sc.what_ifs),
    })
    return {c: row[c] for c in row_columns(list(point.values)) if c in row}


def step_rows(point: SweepPoint, run: dict) -> list[dict]:
    """The point's per-RL-step records, each with point, point_id and replicate first."""
    return [{"point": point.index, "point_id": point.point_id, "replicate": point.replicate, **rec}
            for rec in run["steps"]]
