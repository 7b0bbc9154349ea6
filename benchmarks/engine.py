"""Fast engine vs reference engine: wall time and agreement on whole generation phases.

    python benchmarks/engine.py [--quick]

Prints one row per case: scenario, responses, tokens, reference wall s, fast wall s (median of 5),
their ratio (measured in the same process, back to back, so machine noise affects both alike) and the
relative difference in simulated rollout time. The 235B case runs the fast engine only (the
reference engine steps every token of 65,536 responses; it is the oracle for small cases).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from specsim.scenario import load_scenario
from specsim.sim.cluster import draw_step, simulate_generation
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="8B cases at 128 prompts (for a fast look)")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
