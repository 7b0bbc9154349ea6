"""Shared pytest set-up: a deterministic hypothesis profile.

Property tests must not fail "sometimes": the `ci` profile (loaded by default) derandomizes
hypothesis (examples derived from each test's source, the same on every run and machine),
keeps no example database between runs, and prints the reproduction blob of any failure.
`HYPOTHESIS_PROFILE=dev pytest` explores fresh random examples locally.

The collection is ordered for pytest-xdist's work stealing (`-n auto --dist worksteal`), which
hands worker k the k-th contiguous slice of the collection and lets an idle worker steal the tail
half of the busiest one's queue: the costly test modules (MODULE_CPU_S) are dealt to the slices
longest first, each to the slice with the least cost so far (LPT), and lead their slices; the
cheap tests fill the slices' tails, where stealing evens the end out. A module stays in one
piece, so its module-scoped fixtures are built once. A module with a test marked `long` that the
table does not list counts as LONG_S.
"""

import os
from itertools import islice

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, deadline=None,
    suppress_health_check=(HealthCheck.too_slow,),
)
settings.register_profile("dev", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


#: seconds a worker spends on each test module that costs more than ~2.5 s: CPU (user + sys, with
#: the processes its tests start) measured one folder at a time with `-n 0` (2026-12-04; the Ray
#: test's daemons, whose CPU no rusage sees, counted by wall time); only the order they give
#: matters: remeasure when a module's cost changes by much
MODULE_CPU_S = {
    "tests/sim/test_engine.py": 88,
    "tests/sim/test_fleet.py": 59,
    "tests/test_reliability_classes.py": 44,
    "tests/cli/test_fuzz.py": 43,
    "tests/study/test_sweep.py": 35,
    "tests/workload/test_context_acceptance.py": 27,
    "tests/sim/test_pipeline.py": 24,
    "tests/calibrate/acceptance/test_acceptance_shape.py": 20,
    "tests/study/test_planner.py": 18,
    "tests/study/test_crash_safety.py": 18,
    "tests/study/test_reliability.py": 17,
    "tests/study/test_planner_feasibility.py": 15,
    "tests/workload/test_tau_semantics.py": 10,
    "tests/study/test_projection.py": 8,
    "tests/cli/test_cli_basic.py": 8,
    "tests/study/test_planner_bounds.py": 7,
    "tests/explain/test_ladder.py": 7,
    "tests/explain/test_in_run.py": 7,
    "tests/cost/test_proposal_rate.py": 7,
    "tests/cli/test_run_cli.py": 7,
    "tests/cli/test_cli_layers.py": 7,
    "tests/workload/test_lengths.py": 6,
    "tests/test_architecture.py": 6,
    "tests/study/test_project_folder.py": 6,
    "tests/calibrate/traces/test_trace_fit.py": 6,
    "tests/study/test_plain_outputs.py": 5,
    "tests/sim/test_inflight_pause.py": 5,
    "tests/cli/test_mixed_pools_cli.py": 5,
    "tests/calibrate/kernels/test_kernel_calibration.py": 5,
    "tests/workload/test_beta_ppf.py": 4,
    "tests/validate/test_validate.py": 4,
    "tests/test_notebook.py": 4,
    "tests/study/test_report_security.py": 4,
    "tests/cli/test_output_guard.py": 4,
    "tests/calibrate/test_calibrate_cli.py": 4,
    "tests/study/test_report_html.py": 3,
    "tests/sim/test_progress.py": 3,
    "tests/cli/test_conventions.py": 3,
    "tests/calibrate/workload/test_workload_fit.py": 3,
}
LONG_S = 20.0


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def scheduled(items: list, workers: int) -> list:
    """`items` in the order described above, for `workers` slices."""
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(_module(item), []).append(item)
    cost = {m: MODULE_CPU_S.get(m, LONG_S if any(i.get_closest_marker("long") for i in its) else 0.0)
            for m, its in modules.items()}
    load, lead = [0.0] * workers, [[] for _ in range(workers)]
    for m in sorted((m for m in modules if cost[m] > 0), key=lambda m: -cost[m]):
        k = load.index(min(load))
        lead[k] += modules[m]
        load[k] += cost[m]
    rest = iter([i for m, its in modules.items() if cost[m] == 0 for i in its])
    out: list = []
    for k in range(workers):   # worksteal's first cut: worker k gets remaining // (workers - k) items
        size = (len(items) - len(out)) // (workers - k)
        out += lead[k] + list(islice(rest, max(0, size - len(lead[k]))))
    return out + list(rest)


def pytest_collection_modifyitems(config, items):
    """Order the collection for the workers (scheduled); `-n 0` runs it costly modules first."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    items[:] = scheduled(items, workers)



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
