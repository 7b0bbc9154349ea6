"""The summary's explain block (specsim/study/report/summary.py): the `specsim explain` command it
prints reaches the point (short names, values `--point` cannot carry as --set, the run's
overrides without the sweep's), it explains the best SD point when the best runs no SD, and a
counterfactual run gets no command; the ranking of all points orders means that differ only by
floating-point rounding in sweep order."""

import copy
import shlex

from specsim.explain.ladder import parse_point
from specsim.scenario import validate_doc
from specsim.study.report.summary import explain_block, explain_command, explain_lines, explain_markdown, ranked_points
from tests.small_sweep import TINY_SYNC


def _entry(point, k, values, **metrics):
    m = {key: {"n": 2, "mean": v, "sd": 0.1, "ci95": [v - 0.2, v + 0.2]} for key, v in metrics.items()}
    return {"point": point, "k": k, "policy_lag": values.get("pipeline.policy_lag", 0), "mode": "async",
            "values": values, **m}


def _sc():
    sc = validate_doc(copy.deepcopy(TINY_SYNC), None)
    sc._source_file = "scenarios/my run.yaml"
    return sc


def test_command_reaches_the_point():
    values = {"speculation.k": 3, "pipeline.policy_lag": 4, "rollout.gpus": 1536, "drafter.staleness.after_versions": 50,
              "workload.response_tokens": {"kind": "lognormal", "median": 500, "p99": 3000}}
    best = _entry(7, 3, values, e2e_speedup=2.0, trainer_cap=10.0, tau=3.2, step_setter_tau=2.3)
    block = explain_block(_sc(), best, best, overrides=["workload.prompts=64", "sweep={}", "sweep.replicates=5"],
                          replicates=3)
    call = block["call"]
    assert call["point"] == "k=3,lag=4,gpus=1536,drafter.staleness.after_versions=50"
    assert parse_point(call["point"]) == {k: v for k, v in values.items() if k != "workload.response_tokens"}
    assert call["sets"] == ["workload.prompts=64", "workload.response_tokens={kind: lognormal, median: 500, p99: 3000}"]
    argv = shlex.split(block["command"])
    assert argv[:3] == ["specsim", "explain", "scenarios/my run.yaml"] and argv[-2:] == ["--replicates", "3"]
    assert explain_command(call) == block["command"]
    assert block["is_best"] and block["trainer_bound"] is False and block["ladder"] is None
    assert not block["ladder_requested"]


def test_best_ar_explains_the_best_sd_point_and_counterfactuals_get_no_command():
    ar = _entry(0, 0, {"speculation.k": 0}, e2e_speedup=1.0, trainer_cap=3.0)
    sd = _entry(1, 2, {"speculation.k": 2}, e2e_speedup=2.8, trainer_cap=3.0, tau=2.0, step_setter_tau=1.5)
    block = explain_block(_sc(), ar, sd, replicates=2)
    assert block["point"] == 1 and not block["is_best"] and block["trainer_bound"] is True   # 2.8 >= 0.9 x 3
    assert any("best SD point #1" in line for line in explain_lines(block))
    md = "\n".join(explain_markdown(block))
    assert "**trainer-bound**" in md and "| 2.00 [1.80, 2.20] / 1.50 [1.30, 1.70] |" in md
    assert explain_block(_sc(), ar, None) is None
    cf = explain_block(_sc(), sd, sd, what_if=["what_if.free_trainer"])
    assert cf["command"] is None and cf["call"] is None and not cf["ladder_requested"]
    assert "counterfactual" in "\n".join(explain_markdown(cf))


def test_edge_warnings_name_the_draft_length_grid_without_ar():
    """k = 0 is AR, not the smallest draft length: a best k = 3 out of k in {0, 3, 5} sits on the
    draft-length grid's lower edge, and the note says so in those words; a lag at its largest
    value is flagged as a value; an inner best is not flagged."""
    from types import SimpleNamespace

    from specsim.study.report.summary import review_warnings

    sc = SimpleNamespace(sweep={"speculation.k": [0, 3, 5], "pipeline.policy_lag": [0, 1, 2, 3, 4]})
    out = review_warnings(sc, {"values": {"speculation.k": 3, "pipeline.policy_lag": 4}})
    assert any("speculation.k = 3 is the smallest draft length swept ([3, 5] and 0 = AR)" in w for w in out), out
    assert any("pipeline.policy_lag = 4 is the largest value swept ([0, 1, 2, 3, 4])" in w for w in out), out
    assert review_warnings(sc, {"values": {"speculation.k": 0, "pipeline.policy_lag": 2}}) == []


def test_ranking_ties_means_equal_up_to_rounding_and_keeps_sweep_order():
    step = 1.5741234567891
    points = [_entry(p, 3, {}, e2e_speedup_vs_sync_ar=m) for p, m in
              [(2, 1.2), (4, step * (1 - 3e-13)), (5, 0.0), (6, step * (1 + 3e-13)), (7, step), (8, 1.58)]]
    points[2]["e2e_speedup_vs_sync_ar"]["mean"] = None
    ranked = [e["point"] for e in ranked_points({"points": points, "rank_by": "e2e_speedup_vs_sync_ar"})]
    assert ranked == [8, 4, 6, 7, 2, 5]
    points[1]["e2e_speedup_vs_sync_ar"]["mean"] = step * (1 - 1e-6)     # a real difference still ranks
    ranked = [e["point"] for e in ranked_points({"points": points, "rank_by": "e2e_speedup_vs_sync_ar"})]
    assert ranked == [8, 6, 7, 4, 2, 5]
