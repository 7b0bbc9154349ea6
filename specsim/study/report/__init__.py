"""Reports of a study: tidy tables (tables.py), the summary (summary.py), capacity-planning plots (plots.py), the whole-run projection (projection.py) and progress lines (progress.py)."""
