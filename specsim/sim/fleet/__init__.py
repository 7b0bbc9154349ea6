"""The fleet engine: every engine of a rollout pool advanced together in arrays (loop.py runs the
rounds; state.py holds the pool; events, admit, drain, relay and window are its phases)."""
