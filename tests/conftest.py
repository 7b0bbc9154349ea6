"""Shared pytest set-up: a deterministic hypothesis profile.

Property tests must not fail "sometimes": the `ci` profile (loaded by default) derandomizes
hypothesis (examples derived from each test's source, the same on every run and machine),
keeps no example database between runs, and prints the reproduction blob of any failure.
`HYPOTHESIS_PROFILE=dev pytest` explores fresh random examples locally.

Tests marked `long` are moved to the front of the collection: the suite runs on every core
(pytest-xdist, work stealing), and a long test that starts last would end the run alone.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, deadline=None,
    suppress_health_check=(HealthCheck.too_slow,),
)
settings.register_profile("dev", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """Queue the tests marked `long` first, keeping the order of the rest."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def private_cache_and_strict_warnings(tmp_path_factory):
    """Every test (and every process it starts) keeps specsim's machine cache of parsed length
    files (workload/lengths/parsed_cache.py) in a temporary folder, never in the user's home, and
    treats a numeric warning as an error."""
    os.environ["SPECSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("specsim-cache"))
    # the worker processes a test starts (sweeps, plans: a spawned pool) hold numeric warnings to the
    # rule pyproject.toml's filterwarnings sets in this process: an error, so a warning in a worker's
    # path fails its run (and its test) instead of printing to the terminal
    os.environ["PYTHONWARNINGS"] = "error::RuntimeWarning"
