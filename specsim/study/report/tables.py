"""Results tables and the summary: points.csv / steps.csv / runs.csv, the analysis behind
summary.json and summary.md (best point, speedups with 95 % t-intervals over replicates, the
capacity plan).

Ranking. The best point is the one with the highest mean steady-state E2E speedup *vs synchronous
AR on the same GPUs* — the one reference every point of a sweep shares (an async point's own
baseline may be async AR at its own lag, which would make speedups of different lags
incomparable). When sync AR could not be simulated for some point, the ranking falls back to the
speedup vs each point's baseline. Means within TIE_REL (0.5 %) of the leader are a tie, and the
simpler configuration wins it (smaller k — no SD first — then sweep order): a τ = 1 drafter that
merely matches AR is never reported as the best choice.

Capacity. `capacity_table` prices each simulated rollout size with and without SD (the mean step
over the plan's replicates, paired with the sweep's) and finds the smallest that reaches the
target step time; `capacity_notes` flags a mean step time that rises with more GPUs (reported in
summary.md, never silently plotted).

Confidence intervals. Each replicate r of a point is a paired comparison (the point and its
baselines see the same random draws), so a speedup has one value per replicate; the interval is
mean ± t(0.975, n−1)·sd/√n over the n replicates. With n = 1 there is no interval (and the
summary says so).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import special

from specsim import atomic
from specsim.sim.pipeline import StepRecord
from specsim.study.sweep import swept_paths, trainer_idle_share

#: Per-point metrics aggregated over replicates (mean and 95 % CI).
METRICS = ("e2e_speedup_vs_sync_ar", "e2e_speedup", "generation_speedup", "generation_speedup_vs_sync_ar",
           "step_s", "generation_s", "exposed_generation_s", "trainer_idle_share", "tau", "step_setter_tau",
           "mean_active_batch", "gpu_hours_per_step", "tokens_per_s_per_gpu", "generation_share",
           "token_weighted_batch", "per_token_sd_gain", "sync_ar_generation_share", "trainer_cap")
#: Metrics bounded above (a share of the step cannot exceed it): their intervals are cut there.
SHARE_CEILING = {"trainer_idle_share": 1.0, "sync_ar_generation_share": 1.0}
#: Columns describing a point (identical over its replicates).
DESCRIBE = ("mode", "sd_policy", "k", "policy_lag", "rollout_gpus", "training_gpus", "total_gpus")

#: Two points whose mean ranking speedups differ by less than this fraction are a tie; the simpler
#: configuration (smaller k, no SD first; then sweep order) is reported as best. A 0.5 % step-time
#: difference is below what the calibration can resolve. (The 95 % intervals are reported, not
#: used here: with 2 replicates they span most of the sweep.)
TIE_REL = 0.005
#: A step time that grows by more than this fraction when the rollout pool grows is flagged.
RISE_REL = 0.005

NO_CI_NOTE = ("n=1 replicate: no confidence interval (set sweep.replicates: N, N >= 2, for 95 % t-intervals "
              "over paired replicates)")


# ============================================================================ frames and CSVs
def points_frame(rows: list[dict], cols: list[str]) -> pd.DataFrame:
    """points.csv as a DataFrame: columns in `cols` order (missing columns dropped)."""
    present = [c for c in cols if any(c in r for r in rows)] if rows else list(cols)
    return pd.DataFrame([{c: r.get(c) for c in present} for r in rows], columns=present)


def write_points_csv(path: Path, rows: list[dict], cols: list[str]) -> Path:
    return atomic.write_csv(path, points_frame(rows, cols))


def steps_columns() -> list[str]:
    """steps.csv columns: point identity, then every StepRecord field in its declared order."""
    return ["point", "point_id", "replicate"] + [f.name for f in fields(StepRecord)]


def write_steps_csv(path: Path, steps: list[dict]) -> Path:
    cols = steps_columns()
    extra = [c for c in (steps[0] if steps else {}) if c not in cols]
    return atomic.write_csv(path, pd.DataFrame(steps, columns=cols + sorted(extra)))


def write_runs_csv(path: Path, plan, cap_plan: dict, runs: dict) -> Path:
    """The non-point runs (baselines, sync AR, capacity sizes) with their steady figures."""
    rows = []
    seen = set()
    tasks = list(plan.tasks.values()) + list(cap_plan["tasks"].values())
    for t in tasks:
        roles = set(plan.roles.get(t.key, {t.role}))
        if t.key in cap_plan["tasks"]:
            roles.add("capacity")
        if roles == {"point"} or t.key in seen:
            continue
        seen.add(t.key)
        r = runs.get(t.key, {})
        s = r.get("steady", {})
        meta = r.get("meta", {})
        rows.append({"key": t.key, "role": "+".join(sorted(roles)), "replicate": t.replicate, "mode": meta.get("mode"),
                     "sd_policy": meta.get("policy"), "rollout_gpus": meta.get("rollout_gpus"),
                     "total_gpus": meta.get("total_gpus"), "generation_s": s.get("generation_s"),
                     "step_s": s.get("step_s"), "exposed_generation_s": s.get("exposed_generation_s"),
                     "tau": s.get("tau"), "error": r.get("error", "")})
    cols = ["key", "role", "replicate", "mode", "sd_policy", "rollout_gpus", "total_gpus", "generation_s", "step_s",
            "exposed_generation_s", "tau", "error"]
    return atomic.write_csv(path, pd.DataFrame(rows, columns=cols))


# ============================================================================ statistics
def mean_ci(values, floor: float | None = 0.0, ceiling: float | None = None) -> dict:
    """{n, mean, sd, ci95: [lo, hi] | None}: t-interval over finite values; none for n < 2.

    The interval is intersected with the metric's domain [floor, ∞): every summary metric is a
    time, a rate, a share or a ratio of them, never negative, and a t-interval from 2-3 replicates
    (t = 12.7 at n = 2) otherwise reaches below zero ("speedup 1.02 [-1.22, 3.26]"). Intersecting a
    confidence interval with the parameter space keeps its coverage. floor=None: no domain below;
    ceiling: the domain's upper end where it has one (a share: 1)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(float(v))], float)
    n = len(x)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "ci95": None}
    mean = float(x.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci95": None}
    sd = float(x.std(ddof=1))
    half = t975(n - 1) * sd / math.sqrt(n)
    lo = mean - half if floor is None else max(mean - half, floor)
    hi = mean + half if ceiling is None else min(mean + half, ceiling)
    return {"n": n, "mean": mean, "sd": sd, "ci95": [lo, hi]}


def t_quantile(q: float, df: int) -> float:
    """Student t's `q` quantile at `df` >= 1 degrees of freedom: scipy.stats.t.ppf(q, df)'s number,
    which is scipy.special.stdtrit(df, q), without importing scipy.stats (~0.4 s of every command's
    start-up)."""
    return float(special.stdtrit(df, q))


def t975(df: int) -> float:
    """Student t's 97.5 % quantile at `df` >= 1 degrees of freedom (the half-width factor of a
    95 % t-interval): `t_quantile(0.975, df)`."""
    return t_quantile(0.975, df)


def ratio_ci(values) -> dict:
    """mean_ci of a ratio (one point ÷ another, paired per replicate) whose interval is taken on the
    log scale: the t-interval of log(ratio), exponentiated, so it is positive and multiplicative
    (×/÷ the same factor around the geometric mean) as a ratio's spread is, instead of a symmetric
    interval that reaches below 0 at 2-3 replicates. `mean` stays the arithmetic mean of the
    ratios; `scale` says "log". Non-positive ratios (not ratios of times) give no interval."""
    m = mean_ci(values, floor=None)
    x = np.asarray([v for v in values if v is not None and math.isfinite(float(v))], float)
    m["scale"] = "log"
    if m["n"] < 2 or np.any(x <= 0):
        m["ci95"] = None
        return m
    lx = np.log(x)
    half = t975(len(x) - 1) * float(lx.std(ddof=1)) / math.sqrt(len(x))
    m["ci95"] = [float(np.exp(lx.mean() - half)), float(np.exp(lx.mean() + half))]
    return m


#: fewer replicates than this: an interval's t-factor (12.7 at 2) makes it too wide and too unstable to act on
MIN_REPLICATES_FOR_INTERVALS = 3


def few_replicates_warning(n: int) -> str | None:
    """The warning every report gives when its intervals rest on 2 replicates, fewer than
    MIN_REPLICATES_FOR_INTERVALS (None otherwise: one replicate has no interval to warn about, and
    says so where it is printed)."""
    if not 2 <= n < MIN_REPLICATES_FOR_INTERVALS:
        return None

    t = t975(n - 1)
    return (f"intervals rest on {n} replicates (Student t = {t:.1f}): they are wide and move a lot from run to "
            f"run; run at least {MIN_REPLICATES_FOR_INTERVALS} replicates before acting on them")


#: Async: below this share of the step spent waiting for rollouts, the trainer sets the pace.
TRAINER_BOUND_IDLE = 0.10


def bottleneck(idle_share: float | None) -> str | None:
    """'trainer' or 'generation' for an async point from its trainer idle share (exposed
    generation ÷ step); None for sync or unknown. The async step is the trainer's wait plus its
    work, so the wait bounds what any rollout-side change can save: below TRAINER_BOUND_IDLE
    (10 %) faster or more rollouts shorten the step by less than that, and the trainer pool sets
    the period (the 8B async run: AR 10.4 of 75.0 s, SD 0.6 of 60.5 s). Above it the rollouts
    set it."""
    if idle_share is None or not math.isfinite(idle_share):
        return None
    return "trainer" if idle_share < TRAINER_BOUND_IDLE else "generation"


def tie_tolerance(m: dict) -> float:
    """Ranking tolerance around a leader's mean: TIE_REL of it."""
    return TIE_REL * abs(m["mean"])


def _clean(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    return v


# ============================================================================ analysis
def analyse(sc, rows: list[dict], cols: list[str]) -> dict:
    """Aggregate rows per point; pick the best point, the best SD and the best AR point."""
    df = points_frame(rows, cols)
    swept = swept_paths(sc)
    reps = int(df["replicate"].nunique()) if len(df) else 0
    rank = "e2e_speedup_vs_sync_ar"
    if len(df) == 0 or not np.all(np.isfinite(df[rank].astype(float))):
        rank = "e2e_speedup"
    agg = []
    for idx, g in df.groupby("point", sort=True):
        first = g.iloc[0]
        entry: dict[str, Any] = {"point": int(idx), "point_ids": list(g["point_id"]),
                                 "values": {p: _clean(first[p]) for p in swept if p in g}}
        for c in DESCRIBE:
            entry[c] = _clean(first[c])
        for m in METRICS:
            entry[m] = mean_ci(g[m].astype(float), ceiling=SHARE_CEILING.get(m))
        agg.append(entry)

    def best_of(entries):
        cand = [e for e in entries if e[rank]["mean"] is not None]
        if not cand:
            return None
        top = max(cand, key=lambda e: (e[rank]["mean"], -e["point"]))
        tied = [e for e in cand if e[rank]["mean"] >= top[rank]["mean"] - tie_tolerance(top[rank])]
        return min(tied, key=lambda e: (e["k"], e["point"]))   # the simpler configuration wins a tie

    best = best_of(agg)
    best_sd = best_of([e for e in agg if e["k"] > 0])
    best_ar = best_of([e for e in agg if e["k"] == 0])
    out = {"frame": df, "points": agg, "rank_by": rank, "replicates": reps, "best": best, "best_sd": best_sd,
           "best_ar": best_ar, "swept": swept}
    if best:
        runner = best_of([e for e in agg if e["point"] != best["point"]])
        if runner:
            out["best_vs_runner_up"] = _paired_margin(df, rank, best["point"], runner["point"])
    if best_sd and best_ar:
        out["sd_gain_over_best_ar"] = _paired_ratio(df, "step_s", best_ar["point"], best_sd["point"])[0]
    # speedup of each SD point over its AR sibling (same swept values with speculation.k = 0)
    out["vs_k0"] = _vs_k0(df, swept)
    return out


def _paired_ratio(df: pd.DataFrame, col: str, a: int, b: int) -> tuple[dict, int]:
    """ratio_ci of point a's `col` ÷ point b's, replicate by replicate (the two see the same draws;
    a log-scale interval), and how many replicates both have."""
    x = df[df["point"] == a].set_index("replicate")[col]
    y = df[df["point"] == b].set_index("replicate")[col]
    common = sorted(set(x.index) & set(y.index))
    return ratio_ci([x[r] / y[r] for r in common]), len(common)


def _paired_margin(df: pd.DataFrame, rank: str, best: int, runner: int) -> dict:
    """How clearly the best point beats the runner-up: the ratio of their ranking metric per
    replicate (_paired_ratio), its mean and 95 % interval. `separated`: the interval lies above 1;
    otherwise the two are within the replicates' spread and this run does not rank them."""
    ratio, n = _paired_ratio(df, rank, best, runner)
    ci = ratio["ci95"]
    return {"runner_up": int(runner), "ratio": ratio, "replicates": n,
            "separated": bool(ci is not None and ci[0] > 1.0)}


def _vs_k0(df: pd.DataFrame, swept: list[str]) -> pd.DataFrame | None:
    """Per row: generation and E2E speedup over the k=0 point with the same other swept values."""
    kp = "speculation.k"
    if kp not in swept or not (df[kp] == 0).any():
        return None
    others = [p for p in swept if p != kp]
    key_cols = others + ["replicate"]
    ar = df[df[kp] == 0].set_index(key_cols) if key_cols else df[df[kp] == 0]
    out = []
    for _, r in df.iterrows():
        key = tuple(r[c] for c in key_cols)
        try:
            a = ar.loc[key if len(key) > 1 else key[0]]
        except KeyError:
            continue
        if isinstance(a, pd.DataFrame):
            a = a.iloc[0]
        out.append({"point": int(r["point"]), "replicate": int(r["replicate"]), "k": int(r[kp]),
                    **{p: r[p] for p in others},
                    "generation_speedup_vs_k0": a["generation_s"] / r["generation_s"],
                    "e2e_speedup_vs_k0": a["step_s"] / r["step_s"],
                    "e2e_speedup_vs_sync_ar": r["e2e_speedup_vs_sync_ar"], "tau": r["tau"]})
    return pd.DataFrame(out) if out else None


# ============================================================================ capacity
def capacity_table(cap_plan: dict, runs: dict) -> dict:
    """Step time and GPU-hours per 1,000 RL steps per rollout size, AR and SD, as means over the
    plan's replicates (95 % t-interval of the step time where n ≥ 2); the target and the smallest
    rollout pool whose mean step reaches it, with and without SD. A size whose runs all failed
    carries the first error."""
    by_size: dict[tuple[str, int], dict] = {}
    for e in cap_plan["entries"]:
        g = by_size.setdefault((e["variant"], e["rollout_gpus"]),
                               {"total_gpus": e["total_gpus"], "step": [], "gen": [], "idle": [], "errors": [],
                                "by_rep": {}})
        r = runs.get(e["key"], {})
        s = r.get("steady")
        if s:
            g["step"].append(s["step_s"])
            g["by_rep"][int(e.get("replicate", 0))] = s["step_s"]
            g["gen"].append(s["generation_s"])
            g["idle"].append(trainer_idle_share(r.get("meta", {}).get("mode", ""), s))
        elif r.get("error"):
            g["errors"].append(r["error"])
    rows = []
    for (variant, n), g in by_size.items():
        step = mean_ci(g["step"])
        ok = step["mean"] is not None
        rows.append({"rollout_gpus": n, "total_gpus": g["total_gpus"], "variant": variant,
                     "step_s": step["mean"], "step_s_ci95": step["ci95"], "replicates": step["n"],
                     "step_s_by_replicate": {str(k): v for k, v in sorted(g["by_rep"].items())},
                     "generation_s": mean_ci(g["gen"])["mean"], "trainer_idle_share": mean_ci(g["idle"])["mean"],
                     "gpu_hours_per_1000_steps": (g["total_gpus"] * step["mean"] * 1000 / 3600) if ok else None,
                     "error": "" if ok else (g["errors"][0] if g["errors"] else "")})
    for err in cap_plan["errors"]:
        rows.append({"rollout_gpus": err["rollout_gpus"], "total_gpus": None, "variant": err["variant"],
                     "step_s": None, "step_s_ci95": None, "replicates": 0, "generation_s": None,
                     "trainer_idle_share": None,
                     "gpu_hours_per_1000_steps": None, "error": err["error"]})
    rows.sort(key=lambda r: (r["variant"], r["rollout_gpus"]))
    target = cap_plan["target_step_s"]
    target_source = "output.capacity.target_step_s"
    if target is None:
        own = [r for r in rows if r["variant"] == "ar" and r["rollout_gpus"] == cap_plan["scenario_rollout_gpus"]
               and r["step_s"] is not None]
        target = own[0]["step_s"] if own else None
        target_source = f"AR step time at the scenario's {cap_plan['scenario_rollout_gpus']} rollout GPUs"
    minimum = {}
    for variant in ("ar", "sd"):
        mine = sorted((r for r in rows if r["variant"] == variant and r["step_s"] is not None),
                      key=lambda r: r["rollout_gpus"])
        if mine:
            minimum[variant] = _min_gpus([(r["rollout_gpus"], r["step_s"]) for r in mine], target,
                                         cap_plan["gpus_per_engine"])
            minimum[variant].update(_min_range([(r["rollout_gpus"], r.get("step_s_ci95")) for r in mine], target))
    return {"rows": rows, "target_step_s": target, "target_source": target_source, "minimum": minimum,
            "notes": capacity_notes(rows), "replicates": cap_plan.get("replicates", 1),
            "k": cap_plan["k"], "has_sd": cap_plan["has_sd"], "reference_point": cap_plan["reference_point"],
            "gpus_per_engine": cap_plan["gpus_per_engine"], "sizes": cap_plan["sizes"]}


def capacity_notes(rows: list[dict]) -> list[str]:
    """Flags for a capacity plan a reader should not take at face value: a step time that rises
    when the rollout pool grows (more GPUs should never be slower; it points at a per-step cost
    that grows with the pool, e.g. weight sync or a smaller per-engine batch, worth checking).

    With replicates the comparison is paired: replicate r of both sizes sees the same draws, so
    the ratio of their step times is taken per replicate and the note fires only when its mean
    exceeds 1 + RISE_REL *and* its 95 % interval excludes 1 -- a rise inside the replicates'
    spread (a tail-bound async step varies by ±20 % between replicates) is not flagged. With one
    replicate (or rows without per-replicate times) the means are compared as they are."""
    notes = []
    for variant, label in (("ar", "AR"), ("sd", "SD")):
        pts = sorted(((r["rollout_gpus"], r["step_s"], r.get("step_s_by_replicate") or {}) for r in rows
                      if r["variant"] == variant and r["step_s"] is not None), key=lambda t: t[0])
        for (n0, s0, b0), (n1, s1, b1) in itertools.pairwise(pts):
            common = sorted(set(b0) & set(b1))
            if len(common) >= 2:
                m = ratio_ci([b1[r] / b0[r] for r in common])
                rises = m["mean"] > 1 + RISE_REL and m["ci95"][0] > 1
                detail = f", paired over {len(common)} replicates: ×{m['mean']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]"
            else:
                rises, detail = s1 > s0 * (1 + RISE_REL), ""
            if rises:
                notes.append(f"{label} step time rises from {s0:.1f} s at {n0} to {s1:.1f} s at {n1} rollout GPUs "
                             f"(+{100 * (s1 / s0 - 1):.1f} %{detail}): more GPUs are slower here; check which stage "
                             "grows (steps.csv / runs.csv) before sizing on it")
    return notes


def _min_gpus(pts: list[tuple[int, float]], target: float | None, per_engine: int) -> dict:
    """Smallest simulated size meeting the target, and a log-log interpolated estimate (rounded
    up to whole engines) between the largest size that misses it and that one."""
    if target is None:
        return {"simulated": None, "interpolated": None}
    ok = [n for n, s in pts if s <= target * (1 + 1e-9)]
    if not ok:
        return {"simulated": None, "interpolated": None, "note": f"no simulated size reaches {target:.1f} s"}
    n_ok = min(ok)
    below = [(n, s) for n, s in pts if n < n_ok]
    est = n_ok
    if below:
        n0, s0 = max(below)
        s1 = dict(pts)[n_ok]
        if s0 > target > 0 and s1 > 0 and s0 > s1:
            f = (math.log(s0) - math.log(target)) / (math.log(s0) - math.log(s1))
            n_star = math.exp(math.log(n0) + f * (math.log(n_ok) - math.log(n0)))
            est = int(min(n_ok, math.ceil(n_star / per_engine - 1e-9) * per_engine))
    out = {"simulated": int(n_ok), "interpolated": int(est)}
    if n_ok == pts[0][0]:
        out["note"] = (f"the smallest simulated size ({n_ok} GPUs) already reaches the target: the minimum is "
                       f"{n_ok} GPUs or fewer (add smaller sizes to output.capacity.rollout_gpus)")
    return out


def _min_range(cis: list[tuple[int, list | None]], target: float | None) -> dict:
    """What the replicates' intervals allow of the minimum size: `may_reach` is the smallest size
    whose 95 % step-time interval reaches down to the target, `surely_reaches` the smallest whose
    whole interval lies at or under it (None: none). When they differ the answer is a range, not
    the count the means give. Empty without a target or without intervals."""
    if target is None or not any(ci for _, ci in cis):
        return {}
    tol = target * (1 + 1e-9)
    may = [n for n, ci in cis if ci and ci[0] <= tol]
    sure = [n for n, ci in cis if ci and ci[1] <= tol]
    return {"may_reach": min(may) if may else None, "surely_reaches": min(sure) if sure else None}


def capacity_answer(m: dict, sizes: list[int], *, reason: bool = True) -> str:
    """The minimum rollout GPUs for the target as a reader should take it: a range when the
    step-time intervals straddle the target (_min_range), '≤ N' at the smallest simulated size,
    else the simulated count with its '≈' interpolation; 'not reached' when no size reaches it.
    `reason=False`: without the clause saying why a range (a plot's box marks it instead)."""
    if not m or m.get("simulated") is None:
        return "not reached by any simulated size"
    n, smallest = m["simulated"], m["simulated"] == min(sizes)
    may, sure = m.get("may_reach"), m.get("surely_reaches")
    if may is not None and (may != n or sure != n):
        low = f"≤ {may:,}" if may == min(sizes) else f"{may:,}"
        if sure is None:
            why = "no simulated size's step-time interval lies wholly under the target"
            text = f"from {low} to more than {max(sizes):,} GPUs (means: {n:,})"
        else:
            why = "the step-time intervals straddle the target"
            text = f"between {low} and {sure:,} GPUs (means: {n:,})"
        return f"{text}: {why}" if reason else text
    if smallest:
        return f"≤ {n:,} GPUs (the smallest size simulated)"
    return f"{n:,} GPUs simulated (≈ {m['interpolated']:,} interpolated)"


def jsonable(obj: Any) -> Any:
    """A JSON-safe copy: numpy scalars/arrays and DataFrames to plain types, paths to strings,
    non-finite floats to None (JSON has no NaN). Used by every `--format json` and summary.json."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, pd.DataFrame):
        return jsonable(obj.to_dict(orient="records"))
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (Path, np.str_)):
        return str(obj)
    return _clean(obj)


#: Markdown's inline syntax: emphasis, code, links, table cells, strike-through; `_` only at a
#: word's edge (inside a word, as in qwen3_8b, no Markdown reads it as emphasis)
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_text(value: Any) -> str:
    """A string from a scenario, a catalog or a file as Markdown text that reads as itself: HTML's
    `<`, `>` and `&` as entities (never a tag), Markdown's inline syntax escaped (never a link, an
    emphasis or a table cell's end), and line breaks as spaces (never a new block)."""
    text = " ".join(str(value).split())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_fence(text: str) -> str:
    """A backtick run longer than any in `text`: a code span or fence around it that `text`
    cannot close (a command line or a YAML value holding backticks stays code)."""
    return "`" * max(1, max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)


def md_code(text: str) -> str:
    """`text` as one Markdown code span, whatever backticks it holds."""
    fence = md_fence(text)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt_ci(m: dict | None, digits: int = 3, unit: str = "") -> str:
    """'1.234× [1.200, 1.268]' or '1.234×' (n=1) or 'n/a'."""
    if not m or m.get("mean") is None:
        return "n/a"
    s = f"{m['mean']:.{digits}f}{unit}"
    if m.get("ci95"):
        lo, hi = m["ci95"]
        s += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return s
