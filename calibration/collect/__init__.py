"""Trace collectors that run on real hardware (optional extra: `pip install specsim[collect]`, i.e. torch).

Nothing here is imported by the `specsim` package; torch is imported only when a collector runs.
"""
