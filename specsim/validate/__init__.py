"""Validation: published measurements as targets, each re-simulated from its own scenario and compared row by row."""
