"""Every step record of a set of pipeline runs, written as text, to compare two trees byte for byte.

    python benchmarks/step_records.py OUT [LABEL ...]
    PYTHONPATH=/path/to/other/checkout python benchmarks/step_records.py OUT_OTHER
    cmp OUT OUT_OTHER

Run it from a checkout's root with PYTHONPATH set to that checkout (a script's own folder, not the
working directory, is first on sys.path). A change that claims to keep every number (a cache, a
faster sort, a vectorised loop) is checked by `cmp` of the two files. The cases: the main job's
pool (384 engines) at 256 × 16 and 4096 × 16 at several k and lags, its capacity plan's 768-GPU
pool, the 235B plan's TP2·EP2 layout at 4096 × 16 (engines whose KV holds ~60 of their sequences:
admissions and preemptions every round; at 256 × 16 on 1,024 GPUs it never preempts), and the 8B
pools with a tight KV budget (preemption) on the fleet and the per-engine engine. LABELs run only
the cases whose label contains one of them. Prints each case's CPU seconds.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict

from specsim.scenario import load_scenario
from specsim.sim.pipeline import run_pipeline
from specsim.world.resolve import resolve

MAIN = ["sweep={}"]
CASES = [
    # label, scenario, overrides, engine
    ("235b k5 lag1 256x16", "scenarios/235b_async.yaml", [*MAIN, "workload.prompts=256"], "fast"),
    ("235b k0 lag3 256x16", "scenarios/235b_async.yaml",
     [*MAIN, "workload.prompts=256", "speculation.k=0", "pipeline.policy_lag=3"], "fast"),
    ("235b tp2ep2 1024 256x16 lag2", "scenarios/235b_async.yaml",
     [*MAIN, "workload.prompts=256", "rollout.tp=2", "rollout.ep=2", "rollout.gpus=1024", "training.gpus=1024",
      "pipeline.policy_lag=2"], "fast"),
    ("235b tp2ep2 4096x16", "scenarios/235b_async.yaml",
     [*MAIN, "rollout.tp=2", "rollout.ep=2", "rollout.gpus=1536", "pipeline.steps=5"], "fast"),
    ("235b k5 lag1 4096x16", "scenarios/235b_async.yaml", MAIN, "fast"),
    ("235b 768 4096x16 steps5", "scenarios/235b_async.yaml", [*MAIN, "rollout.gpus=768", "pipeline.steps=5"], "fast"),
    ("8b sync tight", "scenarios/8b_rl_think_sync.yaml",
     [*MAIN, "rollout.gpu_memory_utilization=0.3", "pipeline.steps=3"], "fast"),
    ("8b sync tight fleet", "scenarios/8b_rl_think_sync.yaml",
     [*MAIN, "rollout.gpu_memory_utilization=0.3", "pipeline.steps=3"], "fleet"),
    ("8b async tight fleet", "scenarios/8b_rl_think_async.yaml",
     [*MAIN, "rollout.gpu_memory_utilization=0.3", "pipeline.steps=4"], "fleet"),
    ("8b async", "scenarios/8b_rl_think_async.yaml", [*MAIN, "pipeline.steps=4"], "fast"),
]


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    only = sys.argv[2:]
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for label, path, overrides, engine in CASES:
            if only and not any(o in label for o in only):
                continue
            t0 = time.process_time()
            res = run_pipeline(resolve(load_scenario(path, overrides)), engine=engine, engine_results=False)
            out.write(label + "\n")
            out.writelines(repr(asdict(r)) + "\n" for r in res.records)
            print(f"{label}: {time.process_time() - t0:.2f} CPU-s", flush=True)


if __name__ == "__main__":
    main()
