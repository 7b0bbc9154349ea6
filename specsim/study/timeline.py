"""The rollout timeline a results folder keeps (timeline.csv): one RL step's generation of the
best SD point and of the same point with SD off, on the same draws, for the engine that is
slowest under AR. The run computes it once and persists it; study/report/plots.py only reads it.

Columns: variant (AR | SD), engine, t_s, active, tokens_per_s, k, kv_tokens, then the context of
the plot: step, replicate, policy, rollout_s, and run_key (the best SD point's run key: a resumed
run reuses the file only when that key is unchanged).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from specsim import atomic, inputs
from specsim.errors import SpecError
from specsim.scenario import Scenario, apply_overrides
from specsim.sim.cluster import draw_step, simulate_generation
from specsim.world.resolve import resolve

__all__ = ["timeline_frame", "write_timeline"]

COLUMNS = ["variant", "engine", "t_s", "active", "tokens_per_s", "k", "kv_tokens", "step", "replicate", "policy",
           "rollout_s", "run_key"]


def timeline_frame(sc_sd: Scenario, step: int, replicate: int, versions_since_update: float,
                   engine: str = "fast", run_key: str = "") -> pd.DataFrame:
    """Simulate one step's generation AR and SD on the same draws; the timeline of the engine that
    is slowest under AR, for both."""
    sc_ar = apply_overrides(sc_sd, {"speculation.policy": "off"})
    w_ar, w_sd = resolve(sc_ar), resolve(sc_sd)
    g_ar = simulate_generation(w_ar, draw_step(w_ar, step, replicate), versions_since_update, engine=engine)
    g_sd = simulate_generation(w_sd, draw_step(w_sd, step, replicate), versions_since_update, engine=engine)
    slow = g_ar.slowest.name
    out = []
    for label, g in (("AR", g_ar), ("SD", g_sd)):
        e = next(x for x in g.engines if x.name == slow)
        tl = e.timeline
        for i in range(len(tl["t_s"])):
            out.append({"variant": label, "engine": slow, "t_s": float(tl["t_s"][i]), "active": float(tl["active"][i]),
                        "tokens_per_s": float(tl["tokens_per_s"][i]), "k": int(tl["k"][i]),
                        "kv_tokens": float(tl["kv_tokens"][i]), "step": step, "replicate": replicate,
                        "policy": g.policy_label, "rollout_s": float(e.rollout_s), "run_key": run_key})
    return pd.DataFrame(out, columns=COLUMNS)


def _vsu(run: dict, step: int) -> float:
    for rec in run.get("steps", []):
        if rec.get("step") == step:
            v = rec.get("versions_since_update", 0.0)
            return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0.0
    return 0.0


def read_timeline(path: Path) -> pd.DataFrame | None:
    """timeline.csv when present and well-formed, else None."""
    try:
        df = inputs.read_csv_frame(path, "timeline.csv", "timeline table")
    except SpecError:
        return None
    if list(df.columns) != COLUMNS or df.empty or not set(df["variant"]) <= {"AR", "SD"}:
        return None
    return df


def write_timeline(out_dir: Path, plan, analysis: dict, runs: dict, engine: str = "fast") -> pd.DataFrame | None:
    """timeline.csv for the best SD point (reused when its run key is unchanged); None without SD."""
    ref = analysis.get("best_sd")
    path = out_dir / "timeline.csv"
    if ref is None:
        path.unlink(missing_ok=True)
        return None
    pid = ref["point_ids"][0]
    key = plan.runs_of[pid].point
    old = read_timeline(path)
    if old is not None and (old["run_key"].astype(str) == key).all():
        return old
    sc_sd = plan.point_scenarios[ref["point"]]
    step = sc_sd.pipeline.warmup_steps
    rep = next((p.replicate for p in plan.points if p.point_id == pid), 0)
    data = timeline_frame(sc_sd, step, rep, _vsu(runs.get(key, {}), step), engine, key)
    atomic.write_csv(path, data)
    return data
