"""workload/acceptance/laws.beta_ppf: the Beta quantile function the engines tabulate their
acceptance on (sim/cluster.py), scipy.stats.beta.ppf's numbers without importing scipy.stats."""

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from specsim.sim.cluster import GRID_U
from specsim.workload.acceptance.laws import beta_ppf

#: the grids the simulator evaluates it on (cluster.GRID_U; spread._beta_of_latent's Φ(z)), the
#: far tails and the edges
Q = np.concatenate([GRID_U, special.ndtr(np.linspace(-8.5, 8.5, 4097)), special.ndtr(np.linspace(-40, 40, 81)),
                    [0.0, 1.0, -0.1, 1.1, np.nan]])


def _stats_ppf(q, a, b):
    with warnings.catch_warnings():         # boost's iteration warning in extreme tails, the same from both
        warnings.simplefilter("ignore")
        return stats.beta.ppf(q, a, b)


def _ours(q, a, b):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return beta_ppf(q, a, b)


@settings(max_examples=150, deadline=None)
@given(st.floats(1e-3, 0.999), st.floats(1e-2, 5e4))
def test_beta_ppf_is_scipy_stats_beta_ppf(mean, concentration):
    a, b = mean * concentration, (1.0 - mean) * concentration
    assert np.array_equal(_ours(Q, a, b), _stats_ppf(Q, a, b), equal_nan=True)


def test_beta_ppf_edges_and_bad_shapes():
    assert np.array_equal(_ours(Q, 2.0, 3.0)[-5:], [0.0, 1.0, np.nan, np.nan, np.nan], equal_nan=True)
    for a, b in ((0.0, 1.0), (-1.0, 2.0), (1.0, 0.0), (np.nan, 1.0)):
        assert np.array_equal(_ours(Q, a, b), _stats_ppf(Q, a, b), equal_nan=True)
    assert _ours(0.5, 2.0, 3.0) == _stats_ppf(0.5, 2.0, 3.0)
