"""Studies: sweeps of a scenario's points, their executors, the results folder, capacity plans, whole-run projections and the reports drawn from typed study results."""
