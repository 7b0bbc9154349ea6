"""What the run/sweep tests share: the small async sweep (Qwen3-30B-A3B on H100, 2×2 points × 2
replicates) and TINY_SYNC, a seconds-long sync scenario (Qwen2.5-3B, one GPU) as a dict."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCEN = str(ROOT / "scenarios" / "30b_a3b_h100_async.yaml")
SMALL = ["rollout.gpus=8", "training.gpus=16", "workload.prompts=16", "workload.group_size=4",
         "workload.max_response_tokens=4096", "workload.response_tokens={kind: lognormal, median: 600, p99: 3500}",
         "pipeline.steps=4", "sweep={speculation.k: [0, 3], pipeline.policy_lag: [0, 1], replicates: 2}",
         "output.capacity.rollout_gpus=[4, 8]"]

TINY_SYNC = {
    "name": "tiny", "seed": 0, "hardware": "h100_sxm", "model": "Qwen2.5-3B",
    "rollout": {"gpus": 1, "tp": 1, "max_batch": 8},
    "workload": {"prompts": 2, "group_size": 2, "max_response_tokens": 128,
                 "prompt_tokens": {"kind": "fixed", "tokens": 32},
                 "response_tokens": {"kind": "lognormal", "median": 40, "p99": 120}},
    "drafter": {"kind": "eagle3", "tau": 2.0, "tau_at_k": 3},
    "speculation": {"policy": "always", "k": 2},
    "pipeline": {"mode": "sync", "steps": 2, "warmup_steps": 1},
    "output": {"plots": False},
}
