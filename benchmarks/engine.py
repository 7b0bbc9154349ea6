"""Fast engine vs reference engine, and the fleet engine vs the per-engine fast engine it replaced.

    python benchmarks/engine.py [--quick] [--pool-only]

Prints one row per case: scenario, responses, tokens, reference wall s, fast wall s (median of 5),
their ratio (measured in the same process, back to back, so machine noise affects both alike) and the
relative difference in simulated rollout time. The 235B case runs the fast engine only (the
reference engine steps every token of 65,536 responses; it is the oracle for small cases).

A second table times whole pools: the 235B async pipeline (384 engines, k = 5, lag 2, 6 RL steps)
at 4,096 and 65,536 trajectories per step, and one closed generation phase of the 235B pool, each
on the fleet engine (engine="fast", sim/fleet/loop.py) and on the per-engine fast engine it replaced
(engine="fast_v1"), alternating, median of `--repeats` runs each, with the ratio and the largest
relative difference in step end times.

`--against DIR` adds a third table: the two 235B async pipeline cases on the engine of another
checkout of specsim (e.g. `git worktree add /tmp/old 586b98a`), each version in its own fresh
process (`python -c`, PYTHONPATH set to the checkout, its own scenarios/235b_async.yaml),
alternating old and this tree `--repeats` times, median per RL step of each and the ratio. This is
how the engine issue's "N× faster than 586b98a's engine" is measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from specsim.scenario import load_scenario
from specsim.sim.cluster import draw_step, simulate_generation
from specsim.sim.pipeline import run_pipeline
from specsim.world.resolve import resolve

#: vLLM speculators PR #684's curve (calibration/published/eagle3_context_curve.csv) as [tokens, relative alpha]
PR684 = [[c, r] for c, r in pd.read_csv(Path(__file__).resolve().parents[1] / "calibration" / "published"
                                        / "eagle3_context_curve.csv")[["context_tokens", "relative_alpha"]].to_numpy().tolist()]

CASES = [
    # label, scenario, overrides, run the reference too
    ("Qwen3-8B sync, 32 GB200, 512x16, 16K, AR", "scenarios/8b_rl_think_sync.yaml", ["speculation.policy=off"], True),
    ("Qwen3-8B sync, 32 GB200, 512x16, 16K, EAGLE-3 k=3", "scenarios/8b_rl_think_sync.yaml", [], True),
    ("Qwen3-8B sync, 32 GB200, 512x16, 16K, EAGLE-3 k=3, acceptance falling with context (PR #684)",
     "scenarios/8b_rl_think_sync.yaml", [f"drafter.context_curve={PR684}"], True),
    ("Qwen3-235B-A22B, 2048 GB200, 4096x16, 32K, k=3", "scenarios/235b_async.yaml",
     ["sweep={}", "workload.prompts=4096", "rollout.gpus=2048", "speculation.k=3", "rollout.weight_dtype=bf16",
      "rollout.tp=4", "rollout.ep=4", "workload.response_tokens.median=5000", "workload.response_tokens.p99=30000"],
     False),
]


def timed(fn, repeats: int = 1):
    """(result, median wall seconds over `repeats` calls)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, sorted(times)[len(times) // 2]


ASYNC_235B = ["sweep={}", "speculation.k=5", "pipeline.policy_lag=2", "pipeline.steps=6"]
POOL_CASES = [
    # label, scenario, overrides, pipeline (else one closed generation phase)
    ("235B async pipeline, 384 engines, 256x16 = 4,096 traj/step", "scenarios/235b_async.yaml",
     ASYNC_235B + ["workload.prompts=256"], True),
    ("235B async pipeline, 384 engines, 4096x16 = 65,536 traj/step", "scenarios/235b_async.yaml",
     ASYNC_235B + ["workload.prompts=4096"], True),
    ("235B sync AR generation, 512 engines, 4,096 traj", "scenarios/235b_async.yaml",
     ["sweep={}", "workload.prompts=256", "pipeline.mode=sync", "speculation.policy=off", "training.gpus=null",
      "rollout.gpus=2048"], False),
    ("8B sync generation, 32 engines, 8,192 traj, tight KV (preemption)", "scenarios/8b_rl_think_sync.yaml",
     ["rollout.gpu_memory_utilization=0.3"], False),
    # the 235B plan's KV-bound layout: TP2·EP2 engines whose KV holds ~60 sequences of their ~85 a step
    ("235B plan TP2·EP2 async pipeline, 768 engines, KV-bound, 4096x16", "scenarios/235b_plan.yaml",
     ["sweep={}", "rollout.tp=2", "rollout.ep=2", "pipeline.steps=6"], True),
]


def pool_table(repeats: int) -> Table:
    """Fleet vs per-engine fast engine on whole pools, alternating runs in this process."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(title="fleet engine vs per-engine fast engine (fast_v1), one process, alternating, median "
                        f"(load average {load})")
    for col in ("case", "fast_v1 s", "fleet s", "ratio v1/fleet", "per RL step v1 / fleet s", "max rel diff"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for label, path, overrides, pipeline in POOL_CASES:
        world = resolve(load_scenario(path, overrides))
        if pipeline:
            fn = {e: (lambda e=e, w=world: run_pipeline(w, engine=e)) for e in ("fast_v1", "fast")}
        else:
            draw = draw_step(world, 0)
            fn = {e: (lambda e=e, w=world, d=draw: simulate_generation(w, d, engine=e, record_timeline=False))
                  for e in ("fast_v1", "fast")}
        times = {"fast_v1": [], "fast": []}
        out = {}
        for _ in range(repeats):
            for e in ("fast_v1", "fast"):
                out[e], dt = timed(fn[e])
                times[e].append(dt)
        v1, fl = (sorted(times[e])[len(times[e]) // 2] for e in ("fast_v1", "fast"))
        if pipeline:
            a, b = (out[e].steps_frame()["step_end_s"].to_numpy() for e in ("fast_v1", "fast"))
            n_steps = len(a)
        else:
            a, b = (np.array([r.rollout_s for r in out[e].engines]) for e in ("fast_v1", "fast"))
            n_steps = 1
        diff = float(np.max(np.abs(a - b) / a))
        table.add_row(label, f"{v1:.2f}", f"{fl:.2f}", f"{v1 / fl:.1f}x", f"{v1 / n_steps:.3f} / {fl / n_steps:.3f}",
                      f"{diff:.1e}")
    return table


#: timing of run_pipeline inside one process of any specsim version (world.resolve moved from specsim.resolve)
TIME_PIPELINE = """
import sys, time
from specsim.scenario import load_scenario
try:
    from specsim.world.resolve import resolve
except ImportError:
    from specsim.resolve import resolve
from specsim.sim.pipeline import run_pipeline
world = resolve(load_scenario("scenarios/235b_async.yaml", sys.argv[1:]))
run_pipeline(world, engine="fast")
t0 = time.perf_counter()
run_pipeline(world, engine="fast")
print(time.perf_counter() - t0)
"""


def _time_in(checkout: Path, overrides: list[str]) -> float:
    """Wall seconds of one (warm) run_pipeline in a fresh process of the specsim at `checkout`."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run([sys.executable, "-c", TIME_PIPELINE, *overrides], cwd=checkout, env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def against_table(other: Path, repeats: int) -> Table:
    """This tree's engine vs another checkout's on the 235B async pipeline cases, alternating processes."""
    here = Path(__file__).resolve().parents[1]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    table = Table(title=f"this tree vs {other} (fresh process each, alternating, median; load average {load})")
    for col in ("case", "other s / RL step", "this s / RL step", "ratio other/this"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for label, _, overrides, pipeline in POOL_CASES:
        if not pipeline:
            continue
        steps = int(next(o for o in overrides if o.startswith("pipeline.steps=")).split("=")[1])
        times = {"other": [], "this": []}
        for _ in range(repeats):
            times["other"].append(_time_in(other, overrides) / steps)
            times["this"].append(_time_in(here, overrides) / steps)
        a, b = (sorted(v)[len(v) // 2] for v in (times["other"], times["this"]))
        table.add_row(label, f"{a:.4f}", f"{b:.4f}", f"{a / b:.1f}x")
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="8B cases at 128 prompts (for a fast look)")
    ap.add_argument("--pool-only", action="store_true", help="only the fleet vs fast_v1 pool table")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each engine per pool case (median)")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="also time the 235B pipeline cases on the specsim checkout at DIR (fresh processes)")
    args = ap.parse_args()
    if args.pool_only:
        Console(width=170).print(pool_table(args.repeats))
        if args.against:
            Console(width=170).print(against_table(args.against.resolve(), args.repeats))
        return
    table = Table(title="specsim engine benchmark: fast vs reference (one process, back to back)")
    for col in ("case", "responses", "tokens", "reference s", "fast s", "ratio ref/fast", "rollout diff"):
        table.add_column(col, justify="right" if col != "case" else "left")
    for label, path, overrides, with_ref in CASES:
        ov = list(overrides) + (["workload.prompts=128", "rollout.gpus=8"] if args.quick and with_ref else [])
        world = resolve(load_scenario(path, ov))
        draw = draw_step(world, 0)
        fast, fast_s = timed(lambda w=world, d=draw: simulate_generation(w, d, record_timeline=False), repeats=5)
        if with_ref:
            ref, ref_s = timed(lambda w=world, d=draw: simulate_generation(w, d, engine="reference", record_timeline=False))
            diff = (fast.rollout_s - ref.rollout_s) / ref.rollout_s
            assert fast.total_tokens == ref.total_tokens
            row = (f"{ref_s:.2f}", f"{fast_s:.3f}", f"{ref_s / fast_s:.0f}x", f"{diff:+.2%}")
        else:
            row = ("-", f"{fast_s:.3f}", "-", "-")
        table.add_row(label, f"{draw.n_responses:,}", f"{fast.total_tokens:,}", *row)
    Console(width=170).print(table)
    Console(width=170).print(pool_table(args.repeats))
    if args.against:
        Console(width=170).print(against_table(args.against.resolve(), args.repeats))


if __name__ == "__main__":
    main()
