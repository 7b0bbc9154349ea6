"""Results: tidy tables and the summary (tables.py), capacity-planning plots (plots.py), and
atomic file writes (atomic.py) — everything `specsim run` writes into a results folder."""
