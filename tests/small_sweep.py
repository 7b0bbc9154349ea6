"""The small async sweep the run/sweep tests share (Qwen3-30B-A3B on H100, 2×2 points × 2 replicates)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCEN = str(ROOT / "scenarios" / "30b_a3b_h100_async.yaml")
SMALL = ["rollout.gpus=8", "training.gpus=16", "workload.prompts=16", "workload.group_size=4",
         "workload.max_response_tokens=4096", "workload.response_tokens={kind: lognormal, median: 600, p99: 3500}",
         "pipeline.steps=3", "sweep={speculation.k: [0, 3], pipeline.policy_lag: [0, 1], replicates: 2}",
         "output.capacity.rollout_gpus=[4, 8]"]
