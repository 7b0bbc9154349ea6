"""Whole-run projection: the wall-clock and GPU-hours of a complete RL run, with and without SD.

    specsim project scenarios/235b_run.yaml [--replicates 2] [--set path=value ...] [--format json]

A run of `pipeline.steps` RL steps (hundreds) is simulated end to end — response lengths grow
(`workload.length_growth_per_step`), a frozen drafter goes stale and an online one is retrained
every `drafter.update_every_steps` (its training time on the trainer pool included), async
generation runs continuously across steps — and the same run with `speculation.policy: off`
(AR, same pools, same draws: common random numbers per replicate) is its reference.

Totals per replicate: wall-clock = end of the last step; GPU-hours = wall-clock × GPUs held (sync:
the colocated pool; async: rollout + training pools) / 3600. Across replicates: mean and 95 %
interval in each quantity's domain (`interval`: durations and GPU-hours cut at 0, the run speedup
on the log scale, the time saved signed; none with one replicate).

Money: with a price for the scenario's GPU type (`output.gpu_hour_usd`, $ per GPU-hour, the field
`specsim plan` reads too) the projection also carries `ar_usd`, `sd_usd` and `saved_usd`: each
GPU-hour interval (mean, low, high) times the price, so the dollars are the GPU-hours exactly
scaled and their intervals scale with them. Without a price there are no dollar keys.

:func:`simulate_runs` runs them, :func:`projection_totals` reduces them to the projection (a dict
of totals, each a (mean, low, high) interval), :func:`format_projection` turns that into the text
`specsim project` (specsim/cli/project.py) prints; study/project_folder.py writes the results
folder with the per-step table, its plot and the report.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from specsim.errors import LayoutError
from specsim.scenario import Scenario, apply_overrides
from specsim.sim.progress import RunProgress
from specsim.study.plan import refuse_over_bound, scenario_run_tokens
from specsim.study.report.tables import mean_ci, ratio_ci
from specsim.study.store import RunFailed, RunStore
from specsim.study.sweep import RunTask
from specsim.world.resolve import check

AR = {"speculation.policy": "off"}


def variants(sc: Scenario) -> dict[str, Scenario]:
    """{"sd": the scenario, "ar": its AR twin}: the two runs a projection compares. Each is resolved
    only by the worker that runs it; a run holds `Scenario.total_gpus` GPUs (sync, the colocated
    pool; async, the rollout and training pools)."""
    return {"sd": sc, "ar": apply_overrides(sc, AR)}


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


def interval(values, domain: str = "positive") -> tuple[float, float | None, float | None]:
    """(mean, low, high): the 95 % interval of the mean over replicates, in the quantity's domain.

    domain "positive" (durations, GPU-hours, τ, tokens): the Student-t interval cut at 0, as every
    summary interval is (tables.mean_ci); "ratio" (a speedup): the t-interval of the log, so it is
    positive and multiplicative (tables.ratio_ci); "signed" (a difference: SD may save a negative
    time): the plain t-interval. One replicate: (mean, None, None) — no interval, never a
    zero-width one."""
    vals = [float(v) for v in values]
    m = ratio_ci(vals) if domain == "ratio" else mean_ci(vals, floor=None if domain == "signed" else 0.0)
    if m["mean"] is None:
        return math.nan, None, None
    lo, hi = m["ci95"] or (None, None)
    return m["mean"], lo, hi


def simulate_runs(sc: Scenario, *, replicates: int = 2, engine: str = "fast", jobs: int = 1,
                  on_run: Callable[[int], None] | None = None,
                  on_progress: Callable[[tuple[str, int], RunProgress | None], None] | None = None,
                  store: RunStore | None = None) -> dict[str, list[dict]]:
    """The scenario's whole run with SD and its AR twin, `replicates` paired replicates each:
    {"sd": [result per replicate], "ar": [...]}, each result as study/executors.execute returns it.
    The runs go through `store` (study/store.RunStore: a resumed results folder's runs are reused,
    the rest run on `jobs` worker processes and are kept; None: a store in memory). Every run must
    run: one that cannot raises LayoutError. `on_run(replicate)` is called as each run is reused or
    ends (2 per replicate: a progress bar); `on_progress(run, p)` inside each run (sim/progress.py),
    then `on_progress(run, None)` when it ends, `run` = ("sd" or "ar", replicate)."""
    both = variants(sc)
    for variant in both.values():
        check(variant)   # a twin that cannot exist is one error before anything runs
    refuse_over_bound(sc, 2 * replicates, scenario_run_tokens(sc), "this projection", "--replicates")
    tasks = [RunTask.of(both[kind], r, f"projection_{kind}", engine)
             for r in range(replicates) for kind in ("sd", "ar")]
    run_of = {t.key: (t.role.removeprefix("projection_"), t.replicate) for t in tasks}
    store = store if store is not None else RunStore()
    if on_run is not None:
        for t in tasks:
            if t.key in store:
                on_run(run_of[t.key][1])
    inside = None if on_progress is None else (lambda task, p: on_progress(run_of[task.key], p))
    try:
        got = store.results(tasks, jobs=jobs, must_run=True, on_progress=inside,
                            on_result=None if on_run is None else (lambda t, res: on_run(run_of[t.key][1])))
    except RunFailed as exc:        # a scenario that cannot run (does not fit, bad layout)
        kind, r = run_of[exc.task.key]
        raise LayoutError(f"{sc.name}: the {kind.upper()} run of replicate {r} cannot run: {exc.error}") from None
    per: dict[str, list] = {"sd": [None] * replicates, "ar": [None] * replicates}
    for t in tasks:
        kind, r = run_of[t.key]
        per[kind][r] = got[t.key]
    return per


def projection_totals(sc: Scenario, results: dict[str, list[dict]]) -> dict:
    """The projection's totals from simulate_runs' results: each an interval (interval())."""
    both = variants(sc)
    per = {kind: [run_totals(res["steps"], both[kind].total_gpus) for res in rows] for kind, rows in results.items()}
    replicates = len(per["sd"])
    out = {"scenario": sc.name, "steps": sc.pipeline.steps, "replicates": replicates, "gpus": sc.total_gpus}
    for kind, rows in per.items():
        for key in rows[0]:
            out[f"{kind}_{key}"] = interval([row[key] for row in rows])
    saved = [a["wall_h"] - s["wall_h"] for a, s in zip(per["ar"], per["sd"])]
    out["saved_wall_h"] = interval(saved, "signed")
    out["saved_gpu_h"] = interval([h * out["gpus"] for h in saved], "signed")
    out["run_speedup"] = interval([a["wall_h"] / s["wall_h"] for a, s in zip(per["ar"], per["sd"])], "ratio")
    price = gpu_hour_usd(sc)
    if price is not None:
        out["gpu_hour_usd"] = price
        for kind in ("ar", "sd", "saved"):
            out[f"{kind}_usd"] = tuple(None if v is None else v * price for v in out[f"{kind}_gpu_h"])
    return out


def project_run(sc: Scenario, *, replicates: int = 2, engine: str = "fast", jobs: int = 1,
                on_run: Callable[[int], None] | None = None,
                on_progress: Callable[[tuple[str, int], RunProgress | None], None] | None = None) -> dict:
    """The projection's totals of the scenario's whole run (simulate_runs, then projection_totals),
    without a results folder (study/project_folder.py writes one)."""
    return projection_totals(sc, simulate_runs(sc, replicates=replicates, engine=engine, jobs=jobs, on_run=on_run,
                                               on_progress=on_progress))


def gpu_hour_usd(sc: Scenario) -> float | None:
    """$ per GPU-hour of the scenario's GPU type (`output.gpu_hour_usd`), or None: no price
    (Scenario.gpu_hour_price: mixed pools blend their two prices by their GPUs)."""
    return sc.gpu_hour_price()


def format_projection(p: dict) -> str:
    """The projection as four lines of text: the run, AR, SD, and what SD saves (with a price,
    each GPU-hour figure is followed by its dollars); with one replicate, means only."""
    def f(t, d=1):
        if t[1] is None:
            return f"{t[0]:,.{d}f}"
        return f"{t[0]:,.{d}f} [{t[1]:,.{d}f}, {t[2]:,.{d}f}]"
    usd = (lambda kind: f" = ${f(p[f'{kind}_usd'], 0)}") if "gpu_hour_usd" in p else (lambda kind: "")
    price = f" at ${p['gpu_hour_usd']:,.2f} per GPU-hour" if "gpu_hour_usd" in p else ""
    what = "(mean [95 % interval])" if p["replicates"] >= 2 else "(one replicate: means, no interval)"
    lines = [(f"{p['scenario']}: {p['steps']} RL steps on {p['gpus']} GPUs, {p['replicates']} replicate"
              f"{'s' if p['replicates'] != 1 else ''} {what}{price}"),
             (f"  AR : wall-clock {f(p['ar_wall_h'], 2)} h, {f(p['ar_gpu_h'], 0)} GPU-h{usd('ar')}, step "
              f"{f(p['ar_first_step_s'])} s (first tenth) -> {f(p['ar_last_step_s'])} s (last tenth)"),
             (f"  SD : wall-clock {f(p['sd_wall_h'], 2)} h, {f(p['sd_gpu_h'], 0)} GPU-h{usd('sd')}, step "
              f"{f(p['sd_first_step_s'])} s -> {f(p['sd_last_step_s'])} s, mean tau {f(p['sd_mean_tau'], 2)}"),
             (f"  SD saves {f(p['saved_wall_h'], 2)} h = {f(p['saved_gpu_h'], 0)} GPU-h{usd('saved')}; run speedup "
              f"{f(p['run_speedup'], 3)}x")]
    return "\n".join(lines)
