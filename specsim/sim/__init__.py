"""Simulation layer: rollout engines (fast and reference), the cluster, and the RL pipeline."""
