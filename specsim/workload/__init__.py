"""Workload models: response/prompt lengths and drafter acceptance (pure numpy/scipy, no simulation state)."""
