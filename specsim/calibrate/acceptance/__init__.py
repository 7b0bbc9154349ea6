"""The acceptance-shape fit: one Beta concentration c and position decay d of a drafter family's
acceptance model fitted to published acceptance curves (per-position rates, tau by k), each curve
with its own mean (shape.py).

The data and the scenarios it writes are the caller's: calibration/recipes/acceptance_shape.py
runs it on calibration/published/acceptance_curves.csv for the EAGLE-3 scenarios.
"""
