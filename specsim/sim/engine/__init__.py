"""The per-engine fast engine: one engine integrated event to event (loop.py; its state in state.py)."""
