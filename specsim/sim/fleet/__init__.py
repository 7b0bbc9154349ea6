"""The fleet engine: every engine of a rollout pool advanced together in arrays (loop.py runs the
rounds; state.py holds the pool in eight parts; events, admit, drain, relay and window are its
phases)."""
