"""The EAGLE-3 acceptance shape: per-position rates, and its fit on published curves.

specsim/calibrate/acceptance/shape.py fits one Beta concentration c and position decay d on
published per-position / tau-by-k curves with the simulator's own acceptance math
(specsim/workload/acceptance/population.py); calibration/recipes/acceptance_shape.py runs it on the
bundled curves for the EAGLE-3 scenarios. These tests hold the math to its identities, check that
the fit recovers a known shape from synthetic curves, that the scenario writer edits only the
drafter's shape lines, and that the recipe prints the fit the scenarios carry.
"""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibrate.acceptance import shape as FIT
from specsim.errors import SpecError
from specsim.workload.acceptance.drafter import DrafterAcceptance
from specsim.workload.acceptance.population import beta_nodes, reported_position_rates, reported_tau, reported_taus

ROOT = Path(__file__).resolve().parents[3]
CURVES = ROOT / "calibration" / "published" / "acceptance_curves.csv"


def _recipe():
    """calibration/recipes/acceptance_shape.py, loaded as a module (a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("acceptance_shape_recipe",
                                                  ROOT / "calibration" / "recipes" / "acceptance_shape.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@settings(max_examples=40, deadline=None)
@given(m=st.floats(0.05, 0.97), k=st.integers(1, 8), d=st.floats(0.6, 1.0),
       c=st.one_of(st.none(), st.floats(0.5, 1e5)))
def test_position_rates_sum_to_reported_tau(m, k, d, c):
    """1 + sum_j r_j = 1 / E[1 / tau]: the per-position rates and the reported tau are one law."""
    r = reported_position_rates(m, k, d, c)
    assert r.shape == (k,)
    assert np.all(np.diff(r) <= 1e-12) and np.all((r >= 0) & (r <= 1))
    assert 1.0 + r.sum() == pytest.approx(reported_tau(m, k, d, c), rel=1e-10)
    assert reported_taus(m, [k], d, c)[0] == pytest.approx(reported_tau(m, k, d, c), rel=1e-12)


def test_homogeneous_rates_are_powers_of_alpha():
    assert reported_position_rates(0.7, 4) == pytest.approx([0.7, 0.49, 0.343, 0.2401], rel=1e-12)
    assert reported_position_rates(0.7, 3, 0.9) == pytest.approx([0.7, 0.7**2 * 0.9, 0.7**3 * 0.9**3], rel=1e-12)


def test_heterogeneity_and_decay_bend_the_curve_opposite_ways():
    """Survivors are the easy sequences (conditional rate rises with depth); decay makes it fall."""
    het = reported_position_rates(0.7, 6, 1.0, 3.0)
    dec = reported_position_rates(0.7, 6, 0.9, None)
    assert np.all(np.diff(het[1:] / het[:-1]) > 0)
    assert np.all(np.diff(dec[1:] / dec[:-1]) < 0)


@pytest.mark.parametrize("c", [9000.0, 12000.0])
def test_beta_nodes_survive_jacobi_overflow(c):
    """a + b of several thousand overflowed scipy's Jacobi normaliser (NaN tau); now Legendre nodes."""
    x, w = beta_nodes(0.7, c)
    assert np.all(np.isfinite(x)) and np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0)
    t = reported_tau(0.7, 5, 1.0, c)
    assert reported_tau(0.7, 5, 1.0, 5000.0) < t < reported_tau(0.7, 5, 1.0, None)


def _synthetic(c, d, noise=0.0):
    rng = np.random.default_rng(3)
    curves = []
    for i, (m, k) in enumerate([(0.62, 5), (0.78, 7), (0.55, 3)]):
        r = reported_position_rates(m, k, d, c) + noise * rng.standard_normal(k)
        curves.append(FIT.Curve(f"pos{i}", "position_rate", 1, tuple(r), "synthetic"))
    for i, m in enumerate([0.82, 0.68]):
        taus = reported_taus(m, range(1, 8), d, c) + noise * rng.standard_normal(7)
        curves.append(FIT.Curve(f"tau{i}", "tau_by_k", 1, tuple(taus), "synthetic"))
    return curves


def test_fit_recovers_a_known_shape():
    curves = _synthetic(5.0, 0.93)
    fits, best = FIT.fit_all(curves)
    assert best.variant == "c and d free"
    assert best.c == pytest.approx(5.0, rel=0.03)
    assert best.d == pytest.approx(0.93, abs=0.003)
    assert best.means == pytest.approx((0.62, 0.78, 0.55, 0.82, 0.68), abs=2e-3)
    assert best.sse < 1e-8
    assert all(f.sse >= best.sse - 1e-12 for f in fits)


def test_fit_with_noise_stays_near_the_shape_and_homogeneous_data_picks_no_heterogeneity():
    noisy = FIT.fit_shape(_synthetic(5.0, 0.93, noise=0.005), True, True)
    assert noisy.d == pytest.approx(0.93, abs=0.02)
    assert 2.5 < noisy.c < 12.0
    flat = FIT.fit_shape(_synthetic(None, 0.95), True, False)  # d fixed at 1 cannot mimic decay with c
    assert flat.c > 1e3


def test_published_curves_load_with_sources():
    curves = FIT.load_curves(CURVES)
    assert len(curves) >= 10
    assert {c.metric for c in curves} == {"position_rate", "tau_by_k"}
    for c in curves:
        assert c.url.startswith("https://")
        obs = c.observed()   # rates / tau increments: probabilities (the first increment spans k_first)
        assert np.all(obs > -0.05) and np.all(obs[1:] <= 1.0) and obs[0] <= c.k_first, c.name


def test_bad_curve_row_names_file_and_row(tmp_path):
    bad = tmp_path / "curves.csv"
    src = (ROOT / "calibration/published/acceptance_curves.csv").read_text().splitlines()
    bad.write_text("\n".join([src[0], src[1].replace("position_rate", "per_token", 1)]) + "\n")
    with pytest.raises(SpecError, match=r"metric must be .*, got 'per_token' in .*curves\.csv:2$"):
        FIT.load_curves(bad)


def test_write_scenarios_edits_only_the_shape_lines(tmp_path):
    (tmp_path / "scenarios").mkdir()
    name = "8b_rl_zero_sync.yaml"
    shutil.copy(ROOT / "scenarios" / name, tmp_path / "scenarios" / name)
    before = (tmp_path / "scenarios" / name).read_text().splitlines()
    fit = FIT.Fit("c and d free", 5.5, 0.925, (), (), 2)
    for _ in range(2):  # idempotent
        FIT.write_scenarios(fit, (tmp_path / "scenarios" / name,), "fitted by a test")
    after = (tmp_path / "scenarios" / name).read_text().splitlines()
    assert sum(ln.strip().startswith("heterogeneity: 5.5  # ") for ln in after) == 1
    assert sum(ln.strip().startswith("position_decay: 0.925  # ") for ln in after) == 1
    strip = [ln for ln in after if not ln.strip().startswith(("heterogeneity:", "position_decay:"))]
    assert strip == [ln for ln in before if not ln.strip().startswith(("heterogeneity:", "position_decay:"))]
    from specsim.scenario import load_scenario
    from specsim.world.resolve import acceptance_model
    acc = acceptance_model(load_scenario(tmp_path / "scenarios" / name))
    assert (acc.concentration, acc.decay) == (5.5, 0.925)
    assert acc.tau(3) == pytest.approx(3.32, abs=1e-9)


@pytest.fixture(scope="module")
def published_fit():
    """The published curves and fit_all on them (deterministic; the slowest step of these tests),
    computed once for the tests that read it."""
    curves = FIT.load_curves(CURVES)
    return curves, FIT.fit_all(curves)


def test_fitted_shape_is_what_the_eagle3_scenarios_carry(published_fit):
    """The written shape is the fit's (rounded as written); rerun the recipe with --write after
    changing the data."""
    from specsim.scenario import load_scenario
    from specsim.world.resolve import acceptance_model
    _, (_, best) = published_fit
    for name in _recipe().SCENARIOS:
        acc = acceptance_model(load_scenario(ROOT / "scenarios" / name))
        assert acc.concentration == pytest.approx(best.c, rel=5e-3), name
        assert acc.decay == pytest.approx(best.d, abs=5e-4), name
        assert math.isfinite(DrafterAcceptance.from_tau("eagle3", 2.77, 3, decay=acc.decay,
                                                        concentration=acc.concentration).alpha0)


def test_acceptance_shape_recipe_prints_the_fit_and_writes_nothing(capsys, monkeypatch, published_fit):
    """`python calibration/recipes/acceptance_shape.py` (no --write) prints every variant, the chosen
    shape (the one the EAGLE-3 scenarios carry), the per-curve residuals and the tau(k) tables, and
    leaves the scenarios as they are -- from any working directory. fit_all on the published curves
    is the fixture's (the same pure call; any other curves are fitted)."""
    import re

    from specsim.scenario import load_scenario
    from specsim.world.resolve import acceptance_model

    recipe = _recipe()
    fit_all, (published, fitted) = FIT.fit_all, published_fit
    monkeypatch.setattr(FIT, "fit_all", lambda curves: fitted if curves == published else fit_all(curves))
    monkeypatch.chdir(ROOT / "tests")
    before = {n: (ROOT / "scenarios" / n).read_text() for n in recipe.SCENARIOS}
    assert recipe.main([]) == 0
    out = capsys.readouterr().out
    curves = FIT.load_curves(CURVES)
    assert out.startswith(f"{len(curves)} curves, ") and "points (calibration/published/acceptance_curves.csv)" in out
    for variant in ("homogeneous, d = 1 (no shape)", "c free, d = 1", "d free, homogeneous (c = inf)", "c and d free"):
        assert variant in out
    m = re.search(r"chosen \(lowest BIC among shaped variants\): c and d free: c = ([\d.]+), d = ([\d.]+)\n", out)
    assert m, out
    acc = acceptance_model(load_scenario(ROOT / "scenarios" / recipe.SCENARIOS[0]))
    assert float(m.group(1)) == pytest.approx(acc.concentration, rel=5e-3)
    assert float(m.group(2)) == pytest.approx(acc.decay, abs=5e-4)
    assert "per-curve residuals (model - published), chosen shape:" in out
    assert all(cv.name in out for cv in curves)
    assert "Think 2.77 new:" in out and "Zero 3.32 old:" in out and "tau5/tau3" in out
    assert "leave one source out" not in out and "wrote" not in out
    assert {n: (ROOT / "scenarios" / n).read_text() for n in recipe.SCENARIOS} == before


def test_fit_acceptance_shape_writes_into_the_given_scenarios(tmp_path):
    """With write_to the chosen shape goes into those scenario files, the comment the recipe's
    source naming its command (synthetic curves of a known shape: a fast fit)."""
    recipe = _recipe()
    curves = _synthetic(5.0, 0.93)
    table = tmp_path / "curves.csv"
    table.write_text("curve,metric,k_first,values,model,temperature,url\n" + "".join(
        f"{c.name},{c.metric},{c.k_first},{' '.join(f'{v:.6f}' for v in c.values)},m,0,https://example.org/{c.name}\n"
        for c in curves))
    (tmp_path / "scenarios").mkdir()
    paths = [tmp_path / "scenarios" / n for n in recipe.SCENARIOS]
    for n in recipe.SCENARIOS:
        shutil.copy(ROOT / "scenarios" / n, tmp_path / "scenarios" / n)
    rep = FIT.fit_acceptance_shape(table, examples=recipe.TAU_EXAMPLES, write_to=paths, source=recipe.SOURCE)
    assert rep.best.c == pytest.approx(5.0, rel=0.03) and rep.best.d == pytest.approx(0.93, abs=0.003)
    assert rep.written == paths
    text = paths[0].read_text()
    assert (f"position_decay: {rep.best.d:.3f}  # position decay d: fitted by "
            f"`python calibration/recipes/acceptance_shape.py`") in text
    assert [row.label for row in rep.tau_rows] == ["Think 2.77"] * 2 + ["Zero 3.32"] * 2
    assert rep.tau_rows[1].taus[2] == pytest.approx(2.77, abs=1e-6) and rep.sensitivity == []


def test_acceptance_shape_recipe_bad_data_is_one_error_line(tmp_path, capsys, monkeypatch):
    recipe = _recipe()
    bad = tmp_path / "curves.csv"
    bad.write_text("curve,metric,k_first,values,model,temperature,url\nx,per_token,1,0.5,m,0,https://e.org\n")
    monkeypatch.setattr(recipe, "CURVES", bad)
    assert recipe.main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: metric must be ") and "curves.csv:2" in err and "\n" not in err
