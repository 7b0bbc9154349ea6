"""Whole-run projection: the wall-clock and GPU-hours of a complete RL run, with and without SD.

    specsim project scenarios/235b_run.yaml [--replicates 2] [--set path=value ...] [--format json]

A run of `pipeline.steps` RL steps (hundreds) is simulated end to end — response lengths grow
(`workload.length_growth_per_step`), a frozen drafter goes stale and an online one is retrained
every `drafter.update_every_steps` (its training time on the trainer pool included), async
generation runs continuously across steps — and the same run with `speculation.policy: off`
(AR, same pools, same draws: common random numbers per replicate) is its reference.

Totals per replicate: wall-clock = end of the last step; GPU-hours = wall-clock × GPUs held (sync:
the colocated pool; async: rollout + training pools) / 3600. Across replicates: mean and 95 %
Student-t interval (the replicates differ in every drawn length and acceptance).

Money: with a price for the scenario's GPU type (`output.gpu_hour_usd`, $ per GPU-hour, the field
`specsim plan` reads too) the projection also carries `ar_usd`, `sd_usd` and `saved_usd`: each
GPU-hour interval (mean, low, high) times the price, so the dollars are the GPU-hours exactly
scaled and their intervals scale with them. Without a price there are no dollar keys.

:func:`project_run` computes the projection (a dict of totals, each a (mean, low, high) interval),
:func:`format_projection` turns it into the text `specsim project` (specsim/cli/project.py) prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats

from specsim.errors import LayoutError
from specsim.scenario import Scenario, apply_overrides
from specsim.sim.progress import RunProgress
from specsim.study.executors import run_tasks
from specsim.study.plan import refuse_over_bound, run_tokens
from specsim.study.sweep import RunTask
from specsim.world.resolve import resolve

AR = {"speculation.policy": "off"}


def _gpus(world) -> int:
    return world.rollout.gpus + (world.trainer.layout.gpus if world.pipeline.mode == "async" else 0)


def run_totals(steps: list[dict], gpus: int) -> dict[str, float]:
    """Totals of one simulated run from its step records (StepRecord fields, as
    study/executors.execute returns them): wall-clock hours, GPU-hours, mean step, τ and policy age."""
    df = pd.DataFrame(steps)
    wall_s = float(df["step_end_s"].iloc[-1])
    return {"wall_h": wall_s / 3600.0, "gpu_h": wall_s * gpus / 3600.0, "mean_step_s": float(df["step_s"].mean()),
            # early / late step time: means over the first and last tenth of the run (the final
            # step alone is short — nothing overlaps it)
            "first_step_s": float(df["step_s"].iloc[:max(len(df) // 10, 1)].mean()),
            "last_step_s": float(df["step_s"].iloc[-max(len(df) // 10, 1) - 1:-1].mean() if len(df) > 1
                                 else df["step_s"].iloc[-1]),
            "mean_tau": float(df["tau"].mean()), "mean_policy_age": float(df["mean_policy_age"].mean()),
            "tokens": float(df["tokens"].sum())}


def interval(values) -> tuple[float, float, float]:
    """(mean, low, high): 95 % Student-t interval of the mean (a point when n = 1)."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    half = float(stats.t.ppf(0.975, len(x) - 1)) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - half, m + half


def project_run(sc: Scenario, *, replicates: int = 2, engine: str = "fast", jobs: int = 1,
                on_run: Callable[[int], None] | None = None,
                on_progress: Callable[[tuple[str, int], RunProgress | None], None] | None = None) -> dict:
    """The scenario's whole run with SD and its AR twin, `replicates` paired replicates each: the
    2 × replicates runs go to `jobs` worker processes (study/executors.run_tasks; 1: this process),
    each handing back only its step records. `on_run(replicate)` is called as each run ends (2 per
    replicate: a progress bar); `on_progress(run, p)` inside each run (sim/progress.py), then
    `on_progress(run, None)` when it ends, `run` = ("sd" or "ar", replicate)."""
    w_sd, w_ar = resolve(sc), resolve(apply_overrides(sc, AR))
    refuse_over_bound(sc, 2 * replicates, run_tokens(w_sd), "this projection", "--replicates")
    variants = {"sd": (sc, w_sd), "ar": (apply_overrides(sc, AR), w_ar)}
    tasks = [RunTask.of(variants[kind][0], r, f"projection_{kind}", engine)
             for r in range(replicates) for kind in ("sd", "ar")]
    run_of = {t.key: (t.role.removeprefix("projection_"), t.replicate) for t in tasks}
    per: dict[str, list] = {"sd": [None] * replicates, "ar": [None] * replicates}

    def on_result(task: RunTask, result: dict) -> None:
        kind, r = run_of[task.key]
        if "error" in result:        # a scenario that cannot run (does not fit, bad layout)
            raise LayoutError(f"{sc.name}: the {kind.upper()} run of replicate {r} cannot run: {result['error']}")
        per[kind][r] = run_totals(result["steps"], _gpus(variants[kind][1]))
        if on_run is not None:
            on_run(r)

    inside = None if on_progress is None else (lambda task, p: on_progress(run_of[task.key], p))
    run_tasks(tasks, on_result, jobs=jobs, on_progress=inside)
    out = {"scenario": sc.name, "steps": w_sd.pipeline.steps, "replicates": replicates, "gpus": _gpus(w_sd)}
    for kind, rows in per.items():
        for key in rows[0]:
            out[f"{kind}_{key}"] = interval([row[key] for row in rows])
    saved = [a["wall_h"] - s["wall_h"] for a, s in zip(per["ar"], per["sd"])]
    ratio = [a["wall_h"] / s["wall_h"] for a, s in zip(per["ar"], per["sd"])]
    out["saved_wall_h"] = interval(saved)
    out["saved_gpu_h"] = interval([h * out["gpus"] for h in saved])
    out["run_speedup"] = interval(ratio)
    price = gpu_hour_usd(sc)
    if price is not None:
        out["gpu_hour_usd"] = price
        for kind in ("ar", "sd", "saved"):
            out[f"{kind}_usd"] = tuple(v * price for v in out[f"{kind}_gpu_h"])
    return out


def gpu_hour_usd(sc: Scenario) -> float | None:
    """$ per GPU-hour of the scenario's GPU type (`output.gpu_hour_usd`), or None: no price."""
    return sc.output.gpu_hour_usd.get(sc.hardware)


def format_projection(p: dict) -> str:
    """The projection as four lines of text: the run, AR, SD, and what SD saves (with a price,
    each GPU-hour figure is followed by its dollars)."""
    f = lambda t, d=1: f"{t[0]:,.{d}f} [{t[1]:,.{d}f}, {t[2]:,.{d}f}]"
    usd = (lambda kind: f" = ${f(p[f'{kind}_usd'], 0)}") if "gpu_hour_usd" in p else (lambda kind: "")
    price = f" at ${p['gpu_hour_usd']:,.2f} per GPU-hour" if "gpu_hour_usd" in p else ""
    lines = [(f"{p['scenario']}: {p['steps']} RL steps on {p['gpus']} GPUs, {p['replicates']} replicates "
              f"(mean [95 % interval]){price}"),
             (f"  AR : wall-clock {f(p['ar_wall_h'], 2)} h, {f(p['ar_gpu_h'], 0)} GPU-h{usd('ar')}, step "
              f"{f(p['ar_first_step_s'])} s (first tenth) -> {f(p['ar_last_step_s'])} s (last tenth)"),
             (f"  SD : wall-clock {f(p['sd_wall_h'], 2)} h, {f(p['sd_gpu_h'], 0)} GPU-h{usd('sd')}, step "
              f"{f(p['sd_first_step_s'])} s -> {f(p['sd_last_step_s'])} s, mean tau {f(p['sd_mean_tau'], 2)}"),
             (f"  SD saves {f(p['saved_wall_h'], 2)} h = {f(p['saved_gpu_h'], 0)} GPU-h{usd('saved')}; run speedup "
              f"{f(p['run_speedup'], 3)}x")]
    return "\n".join(lines)

