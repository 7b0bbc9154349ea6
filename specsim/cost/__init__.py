"""Pure, vectorized cost functions: no simulation state, numpy arrays in, seconds/bytes out."""
