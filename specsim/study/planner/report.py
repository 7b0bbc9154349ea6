"""The plan's answer from its evaluated candidates: the table, the best of each arm, SD's gain at
each arm's own optimum, the runner-ups, the Pareto fronts, the plot, summary.md.

Figures per candidate are means over the replicates it ran (95 % t-intervals, `tables.mean_ci`,
where n ≥ 2). Only candidates that ran the plan's full `replicates` (the finalists) can be "best".
SD's gain is paired: replicate r of every candidate draws the same responses, so the gain is the
mean of the per-replicate ratios best-AR step ÷ best-SD step, with its interval.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specsim import atomic
from specsim.study.planner.search import STOPPED
from specsim.study.report.tables import fmt_ci, md_text, mean_ci, ratio_ci

__all__ = ["CANDIDATE_COLUMNS", "answer", "candidate_entry", "candidate_rows", "fronts", "plan_markdown", "plot_fronts"]

CANDIDATE_COLUMNS = (
    "candidate", "status", "pruned_by", "dropped_at_halving", "round", "replicates_run", "hardware", "budget_gpus",
    "rollout_gpus", "training_gpus", "total_gpus", "tp", "ep", "pp", "arm", "sd_policy", "k", "policy_lag",
    "bound_step_s", "bound_trainer_s", "bound_throughput_s", "bound_latency_s", "binding_bound",
    "step_s", "step_s_lo", "step_s_hi", "generation_s", "train_s", "tau", "mean_active_batch",
    "trainer_idle_share", "gpu_hours_per_step", "usd_per_step", "overrides", "reason",
)


def _ci(values) -> dict:

    return mean_ci(values)


def candidate_rows(evs, usd: dict[str, float]) -> list[dict]:
    """One row per candidate (pruned and infeasible ones too), sorted by status then step time."""
    rows = []
    for e in evs:
        c = e.cand
        row: dict[str, Any] = {"candidate": c.cid, "status": e.status, "pruned_by": e.pruned_by,
                               "dropped_at_halving": e.dropped, "round": e.round,
                               "replicates_run": len(e.steady), **c.as_dict()}
        b = e.bound
        row.update({"bound_step_s": b.step_s if b else math.nan, "bound_trainer_s": b.trainer_s if b else math.nan,
                    "bound_throughput_s": b.throughput_s if b else math.nan,
                    "bound_latency_s": b.latency_s if b else math.nan, "binding_bound": b.binding if b else ""})
        steps = e.steps()
        m = _ci(steps)
        mean = m["mean"] if m["mean"] is not None else math.nan
        lo, hi = (m["ci95"] if m["ci95"] else (math.nan, math.nan))

        def avg(key, e=e):
            vals = [s[key] for s in e.steady.values() if key in s]
            return float(np.mean(vals)) if vals else math.nan

        gw = avg("gen_window_s") if any("gen_window_s" in s for s in e.steady.values()) else avg("generation_s")
        idle = avg("exposed_generation_s") / mean if c.training_gpus is not None and steps else math.nan
        gph = c.total_gpus * mean / 3600.0
        rate = c.usd_per_gpu_hour(usd)
        row.update({"step_s": mean, "step_s_lo": lo, "step_s_hi": hi, "generation_s": gw, "train_s": avg("train_s"),
                    "tau": avg("tau"), "mean_active_batch": avg("mean_active_batch"), "trainer_idle_share": idle,
                    "gpu_hours_per_step": gph, "usd_per_step": gph * rate if rate is not None else math.nan,
                    "overrides": json.dumps(c.overrides, sort_keys=True), "reason": e.reason})
        rows.append({k: row.get(k) for k in CANDIDATE_COLUMNS})
    order = {"simulated": 0, "pruned": 1, "infeasible": 2, "pending": 3}
    rows.sort(key=lambda r: (order.get(r["status"], 9), -r["replicates_run"],
                             r["step_s"] if r["step_s"] == r["step_s"] else math.inf))
    return rows


def _score(e, objective: str, usd: dict[str, float] | None = None):
    """The objective's ranking key of an evaluated candidate (lower is better)."""
    c = e.cand
    if objective == "min_gpus":
        return (c.total_gpus, e.mean_step())
    if objective == "min_gpu_hours":
        return (c.total_gpus * e.mean_step() / 3600.0, e.mean_step())
    if objective == "min_usd":
        rate = c.usd_per_gpu_hour(usd or {})
        return (c.total_gpus * e.mean_step() / 3600.0 * (math.inf if rate is None else rate), e.mean_step())
    return (e.mean_step(), c.total_gpus)


def candidate_entry(e, usd: dict[str, float], run_steps: int | None = None) -> dict:
    """One evaluated candidate as the answer reports it: configuration, overrides, step and GPU-hour
    intervals over its replicates ($ where its GPU type has a price; per run too with `run_steps`:
    per step × run_steps), per-replicate steps."""
    c = e.cand
    steps = e.steps()
    m = _ci(steps)
    gph = [c.total_gpus * s / 3600.0 for s in steps]
    out = {**c.as_dict(), "label": c.label(), "overrides": c.overrides, "replicates": len(steps),
           "step_s": m, "gpu_hours_per_step": _ci(gph), "tau": _ci([s["tau"] for s in e.steady.values()]),
           "per_replicate_step_s": steps}
    rate = c.usd_per_gpu_hour(usd)   # a mixed pair's: its pools' prices blended by their GPUs
    if rate is not None:
        out["usd_per_step"] = scaled(out["gpu_hours_per_step"], rate)
        out["usd_per_hour"] = c.usd_per_hour(usd)
    if run_steps:
        out["run_steps"] = run_steps
        out["gpu_hours_per_run"] = scaled(out["gpu_hours_per_step"], run_steps)
        if rate is not None:
            out["usd_per_run"] = scaled(out["usd_per_step"], run_steps)
    return out


def scaled(m: dict, factor: float) -> dict:
    """An interval (tables.mean_ci's dict) in other units: every figure times `factor` >= 0 (so $ per
    step is GPU-hours per step times the price exactly, its interval too)."""
    mul = (lambda v: None if v is None else v * factor)
    return {**m, "mean": mul(m["mean"]), "sd": mul(m["sd"]),
            "ci95": [v * factor for v in m["ci95"]] if m.get("ci95") else m.get("ci95")}


def _ranked(pool, plan, usd) -> list:
    """The finalists that meet the plan's target (objectives other than min_step_time), best first."""
    target = plan.target_step_s
    if plan.objective != "min_step_time" and target is not None:
        pool = [e for e in pool if e.mean_step() <= target]
    return sorted(pool, key=lambda e: _score(e, plan.objective, usd))


def answer(evs, plan, replicates: int, usd: dict[str, float]) -> dict:
    """best AR, best SD, SD's gain at each one's own optimum, runner-ups per arm, and the best of
    each GPU type (per arm and overall, by the objective) with the choice between GPU types."""
    target = plan.target_step_s
    run_steps = getattr(plan, "run_steps", None)
    out: dict[str, Any] = {"objective": plan.objective, "target_step_s": target}
    final = [e for e in evs if e.status == "simulated" and len(e.steady) >= replicates]
    best: dict[str, Any] = {}
    for arm in ("ar", "sd"):
        pool = _ranked([e for e in final if e.cand.arm == arm], plan, usd)
        out[f"best_{arm}"] = candidate_entry(pool[0], usd, run_steps) if pool else None
        out[f"runner_up_{arm}"] = [candidate_entry(e, usd, run_steps) for e in pool[1:4]]
        best[arm] = pool[0] if pool else None
    if best["ar"] is not None and best["sd"] is not None:
        a, s = best["ar"], best["sd"]
        out["sd_gain_at_optima"] = paired_ratio(a, s)   # a ratio: its interval on the log scale
        if plan.objective != "min_step_time":
            out["sd_resource_ratio"] = _score(a, plan.objective, usd)[0] / _score(s, plan.objective, usd)[0]
    else:
        out["sd_gain_at_optima"] = None
    per_hw = []
    for hw in sorted({e.cand.hardware for e in evs}):
        pool = _ranked([e for e in final if e.cand.hardware == hw], plan, usd)
        row: dict[str, Any] = {"hardware": hw, "best": candidate_entry(pool[0], usd, run_steps) if pool else None}
        for arm in ("ar", "sd"):
            arm_pool = [e for e in pool if e.cand.arm == arm]
            row[arm] = candidate_entry(arm_pool[0], usd, run_steps) if arm_pool else None
        row["_key"] = _score(pool[0], plan.objective, usd) if pool else None
        per_hw.append(row)
    ranked = sorted((r for r in per_hw if r["_key"] is not None), key=lambda r: r["_key"])
    for r in per_hw:
        r.pop("_key")
    out["best_per_hardware"] = per_hw
    out["hardware_choice"] = _hardware_choice(ranked, plan.objective) if len(ranked) > 1 else None
    return out


def paired_ratio(a, b) -> dict:
    """a's mean step ÷ b's, paired over the replicates both ran (the same draws), with its interval
    (`tables.ratio_ci`, log scale); `paired_replicates` lists them."""

    common = sorted(set(a.steady) & set(b.steady))
    out = ratio_ci([a.steady[r]["step_s"] / b.steady[r]["step_s"] for r in common])
    out["paired_replicates"] = common
    return out


def _num(v: float, key: str) -> str:
    """A figure in its unit, to 3 significant digits ($ with its sign)."""
    if key == "total_gpus":
        return f"{v:.0f}"
    return ("$" if key.startswith("usd") else "") + _g(v)


def _g(v: float, digits: int = 3) -> str:
    """`digits` significant digits, without an exponent from 1,000 up ('1,390', '0.0576')."""
    return f"{v:,.0f}" if abs(v) >= 10 ** digits else f"{v:,.{digits}g}"


def _sig(m: dict | None, digits: int = 3, money: bool = False) -> str:
    """An interval to `digits` significant digits ('0.00374 [0.00301, 0.00447]'; '$' before each
    figure with `money`): GPU-hours and $ per step of a small plan are far below 1."""
    if not m or m.get("mean") is None:
        return "n/a"
    d = "$" if money else ""
    s = f"{d}{_g(m['mean'], digits)}"
    if m.get("ci95"):
        s += f" [{d}{_g(m['ci95'][0], digits)}, {d}{_g(m['ci95'][1], digits)}]"
    return s


def _hardware_choice(ranked: list[dict], objective: str) -> dict:
    """Which GPU type wins under the objective, by how much, against each other type's best."""
    win = ranked[0]
    unit = {"min_usd": ("usd_per_step", "per step"), "min_gpu_hours": ("gpu_hours_per_step", "GPU-h per step"),
            "min_gpus": ("total_gpus", "GPUs")}.get(objective, ("step_s", "s per step"))
    key, name = unit

    def val(r):
        v = r["best"][key]
        return v["mean"] if isinstance(v, dict) else v

    others = [{"hardware": r["hardware"], key: val(r), "ratio": val(r) / val(win) if val(win) else None}
              for r in ranked[1:]]
    text = (f"{win['hardware']} ({_num(val(win), key)} {name}) over " + ", ".join(
        f"{o['hardware']} ({_num(o[key], key)}, {o['ratio']:.2f}×)" for o in others))
    return {"hardware": win["hardware"], "figure": key, "value": val(win), "others": others, "text": text}


def fronts(evs, usd: dict[str, float] | None = None, replicates: int | None = None) -> dict[str, list[dict]]:
    """Per arm, the Pareto front of (GPU-hours per step, step time) over the candidates that ran
    `replicates` replicates (all of the plan's: the search keeps every candidate that could be on the
    front for them, so every point is a mean over the same paired draws). Each point is the fastest
    at its cost and the cheapest at its speed, with its 95 % intervals (step, GPU-hours, $ on a
    priced GPU type: `output.gpu_hour_usd`) and `overlaps`: the other front points whose step
    interval overlaps its own (the front cannot tell them apart at these replicates)."""
    usd = usd or {}
    out = {}
    for arm in ("ar", "sd"):
        pool = [e for e in evs if e.status == "simulated" and e.cand.arm == arm
                and (replicates is None or len(e.steady) >= replicates)]
        pts = sorted(((e.cand.total_gpus * e.mean_step() / 3600.0, e.mean_step(), e) for e in pool),
                     key=lambda t: (t[0], t[1]))
        front, best = [], math.inf
        for gph, step, e in pts:
            if step < best:
                steps = e.steps()
                p = {"candidate": e.cand.cid, "label": e.cand.label(), "short": short_label(e.cand),
                     "hardware": e.cand.hardware, "total_gpus": e.cand.total_gpus,
                     "gpu_hours_per_step": gph, "step_s": step, "replicates": len(steps),
                     "step_s_ci": _ci(steps), "gpu_hours_per_step_ci": _ci([e.cand.total_gpus * x / 3600.0
                                                                            for x in steps])}
                rate = e.cand.usd_per_gpu_hour(usd)
                if rate is not None:
                    p["usd_per_step"] = gph * rate
                    p["usd_per_step_ci"] = scaled(p["gpu_hours_per_step_ci"], rate)
                front.append(p)
                best = step
        for p in front:
            p["overlaps"] = [q["candidate"] for q in front if q is not p and _overlap(p["step_s_ci"], q["step_s_ci"])]
        out[arm] = front
    return out


def _overlap(a: dict, b: dict) -> bool:
    """Whether two step-time intervals overlap (a mean without an interval is its own point)."""
    la, ha = a["ci95"] if a.get("ci95") else (a["mean"], a["mean"])
    lb, hb = b["ci95"] if b.get("ci95") else (b["mean"], b["mean"])
    return la <= hb and lb <= ha


def short_label(c) -> str:
    """A front point's label on the plot: GPU type, split, layout, arm, lag ('h100_sxm 12+16 TP4·EP4 k5 L2')."""
    tp, ep, pp = c.layout
    split = f"{c.rollout_gpus}+{c.training_gpus}" if c.training_gpus is not None else f"{c.rollout_gpus}"
    lay = f"TP{tp}" + (f"·EP{ep}" if ep > 1 else "") + (f"·PP{pp}" if pp > 1 else "")
    sd = "AR" if c.policy == "off" else (f"k{c.k}" if c.policy == "always" else f"{c.policy} k{c.k}")
    lag = f" L{c.lag}" if c.training_gpus is not None else ""
    return f"{c.hardware} {split} {lay} {sd}{lag}"


def plot_fronts(stem: Path, sc, fr: dict, target: float | None) -> str | None:
    """Step time vs GPU-hours per step, AR and SD fronts, each point with its step time's 95 %
    interval as a bar and its configuration written beside it (PNG + the CSV it is drawn from, which
    holds both intervals)."""
    from matplotlib.figure import Figure

    rows = []
    for arm, pts in fr.items():
        for p in pts:
            sci, gci = p["step_s_ci"].get("ci95") or [None, None], p["gpu_hours_per_step_ci"].get("ci95") or [None, None]
            rows.append({"arm": arm, **{k: v for k, v in p.items() if not k.endswith("_ci") and k != "overlaps"},
                         "step_s_lo": sci[0], "step_s_hi": sci[1], "gpu_hours_per_step_lo": gci[0],
                         "gpu_hours_per_step_hi": gci[1], "overlaps": " ".join(p["overlaps"])})
    if not rows:
        return None
    data = pd.DataFrame(rows)
    fig = Figure(figsize=(8.4, 5.6))
    ax = fig.add_subplot(111)
    styles = {"ar": {"linestyle": "--", "marker": "s", "color": "0.45", "label": "AR (no SD)"},
              "sd": {"linestyle": "-", "marker": "o", "color": "0.1", "label": "SD"}}
    xs = [p["gpu_hours_per_step"] for pts in fr.values() for p in pts]
    ys = [p["step_s"] for pts in fr.values() for p in pts]
    for arm, pts in fr.items():
        if not pts:
            continue
        x = np.array([p["gpu_hours_per_step"] for p in pts])
        y = np.array([p["step_s"] for p in pts])
        ax.step(x, y, where="post", linestyle=styles[arm]["linestyle"], color=styles[arm]["color"], linewidth=1,
                label=styles[arm]["label"])
        lo = np.array([(p["step_s_ci"].get("ci95") or [c, c])[0] for p, c in zip(pts, y)])
        hi = np.array([(p["step_s_ci"].get("ci95") or [c, c])[1] for p, c in zip(pts, y)])
        ax.errorbar(x, y, yerr=np.array([y - lo, hi - y]).clip(min=0), fmt=styles[arm]["marker"],
                    color=styles[arm]["color"], capsize=3, markersize=5, elinewidth=0.8)
        for i, p in enumerate(pts):      # labels staggered so neighbours do not overlap
            dy = (10 + 11 * (i % 3)) * (1 if arm == "sd" else -1)
            ax.annotate(p["short"], (x[i], y[i]), textcoords="offset points", xytext=(8, dy), fontsize=7.5,
                        color=styles[arm]["color"], arrowprops={"arrowstyle": "-", "color": "0.7", "lw": 0.5})
    # the axes frame the points (intervals at 2-3 replicates span far more: their bars run off the frame)
    span_y = max(max(ys) - min(ys), 0.15 * max(ys))
    span_x = max(max(xs) - min(xs), 0.15 * max(xs))
    ax.set_ylim(max(0.0, min(ys) - 0.8 * span_y), max(ys) + 0.8 * span_y)
    ax.set_xlim(max(0.0, min(xs) - 0.3 * span_x), max(xs) + 0.9 * span_x)   # room on the right for labels
    if target:
        ax.axhline(target, color="0.3", linestyle=":", linewidth=1, label=f"target {target:g} s")
    ax.set_xlabel("GPU-hours per RL step")
    ax.set_ylabel("steady step time, s (bars: 95 % interval)")
    ax.set_title(f"{sc.name}: plan — Pareto fronts\n{sc.model}, {sc.pipeline.mode}", fontsize=10)
    ax.grid(True, color="0.9")
    ax.legend(frameon=False)
    fig.tight_layout()
    png = stem.with_suffix(".png")
    atomic.save_figure(png, fig, dpi=130)
    atomic.write_csv(stem.with_suffix(".csv"), data)
    return str(png)


def _fmt(m: dict | None, digits: int = 1) -> str:

    return fmt_ci(m, digits)


def _entry_text(b: dict) -> str:
    """One best configuration: label, step, GPU-hours and $ per step (per run with plan.run_steps)."""

    usd = (f", {_sig(b['usd_per_step'], money=True)} per step (${b['usd_per_hour']:,.4g}/h)"
           if b.get("usd_per_step") else "")
    run = ""
    if b.get("run_steps"):
        run = f"; per run of {b['run_steps']} steps {_sig(b['gpu_hours_per_run'])} GPU-h" + (
            f", {_sig(b['usd_per_run'], money=True)}" if b.get("usd_per_run") else "")
    return (f"{md_text(b['label'])} — step {_fmt(b['step_s'])} s, {_sig(b['gpu_hours_per_step'])} GPU-h per "
            f"step{usd}{run} (n={b['replicates']})")


def plan_markdown(summary: dict) -> str:
    """summary.md of a plan (the printed summary says the same)."""
    a = summary["answer"]
    s = summary["search"]

    lines = [f"# {md_text(summary['scenario'])}: plan", "",
             f"{md_text(summary['model'])} — objective **{a['objective']}**"
             + (f", target {a['target_step_s']:g} s" if a.get("target_step_s") else "")
             + f"; budgets {summary['budgets']} GPUs of {md_text(', '.join(summary['hardware']))}; policy lag ≤ "
               f"{summary['max_policy_lag']}.", "",
             "## Answer", ""]
    choice = a.get("hardware_choice")
    if choice:
        lines.append(f"- **GPU type: {md_text(choice['text'])}** (each GPU type's best, AR or SD, by "
                     f"{a['objective']})")
    per_hw = a.get("best_per_hardware") or []
    if len(per_hw) > 1:
        for r in per_hw:
            b = r.get("best")
            lines.append(f"- best on {md_text(r['hardware'])}: " + (_entry_text(b) if b else "none meets the constraints"))
    for arm, name in (("ar", "AR (no SD)"), ("sd", "SD")):
        b = a.get(f"best_{arm}")
        if b is None:
            lines.append(f"- best {name}: none meets the constraints")
            continue
        lines.append(f"- best {name}: {_entry_text(b)}")
    g = a.get("sd_gain_at_optima")
    if g:
        lines.append(f"- **SD's gain at each one's own optimum: {_fmt(g, 3)}×** (paired over replicates "
                     f"{g['paired_replicates']})")
    for b in summary.get("against") or []:
        detail = md_text(b["detail"]) if b.get("error") else b["detail"]      # an error quotes the scenario
        lines.append(f"- the best against {b['what']} ({md_text(b['label'])}): {detail}")
    fr = summary.get("fronts") or {}
    if any(fr.values()):
        lines += ["", "## Front points (step time vs GPU-hours per step, each arm; equal replicates)", ""]
        for arm in ("ar", "sd"):
            ids = {p["candidate"]: i + 1 for i, p in enumerate(fr.get(arm, []))}
            for i, p in enumerate(fr.get(arm, [])):
                usd = f", {_sig(p['usd_per_step_ci'], money=True)}" if p.get("usd_per_step_ci") else ""
                ties = (" — within the step interval of " + ", ".join(f"{arm.upper()}{ids[c]}" for c in p["overlaps"])
                        if p.get("overlaps") else "")
                lines.append(f"- {arm.upper()}{i + 1}: {md_text(p['label'])} — step {_fmt(p['step_s_ci'])} s, "
                             f"{_sig(p['gpu_hours_per_step_ci'])} GPU-h{usd} (n={p['replicates']}){ties}")
    lines += ["", "## Runner-ups", ""]
    for arm in ("ar", "sd"):
        for r in a.get(f"runner_up_{arm}", []):
            lines.append(f"- {arm.upper()}: {r['label']} — step {_fmt(r['step_s'])} s")
    lines += ["", "## Search", "",
              f"- candidates: {s['candidates']} ({s['infeasible']} infeasible); pruned by bounds: "
              + (", ".join(f"{k} {v}" for k, v in s["pruned_by"].items() if k != STOPPED) or "none")
              + (f"; stopped once they could not win: {s['pruned_by'][STOPPED]} (their steps run + the trainer's "
                 "time of the rest proved the steady mean above a simulated point that dominates them)"
                 if s["pruned_by"].get(STOPPED) else ""),
              (f"- simulated: {s['simulated_candidates']} candidates; {s['computed_runs']} runs simulated, "
               f"{s['reused_runs']} reused; {s['wall_s']:.1f} s wall on {s['jobs']} worker(s)"
               + (f", {s['cpu_s']:.0f} CPU-s ({s['cpu_s_per_computed_run']:.1f} per simulated run)"
                  if s.get("cpu_s_per_computed_run") else "")),
              "- halving, pass by pass: " + ", then ".join(
                  f"{r['candidates']} at {r['replicates']} replicate(s)"
                  + (f" ({r['runs']} runs, {r['wall_s']:.0f} s wall)" if "runs" in r else "") for r in s["rounds"]),
              "- not run to full replicates: " + (", ".join(f"{k} {v}" for k, v in s.get("dropped_at_halving", {}).items())
                                                  or "none")
              + " (cannot win: behind its arm's best by more than the paired per-step difference's 99.9 % t limit "
                "and keep_within; halving: neither in its arm's best keep_fraction nor, beyond that noise, "
                "undominated)",
              ""]
    if summary.get("queries"):
        lines += ["## Inverse answers", ""]
        for q in summary["queries"]:
            lines.append(f"- {q['text']}")
        if "inverse_computed_runs" in s:
            lines.append(f"- their probes (and the baselines'): {s['inverse_computed_runs']} runs simulated, "
                         f"{s['inverse_reused_runs']} reused (included in the search's counts above)")
        lines.append("")
    lines += ["Files: candidates.csv (every candidate), fronts.csv/fronts.png, runs/ (every simulated run).", ""]
    return "\n".join(lines)


def write_tables(out_dir: Path, rows: list[dict]) -> list[str]:
    frame = pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))
    atomic.write_csv(out_dir / "candidates.csv", frame)
    files = ["candidates.csv"]
    if atomic.write_parquet(out_dir / "candidates.parquet", frame) is not None:
        files.append("candidates.parquet")
    return files
