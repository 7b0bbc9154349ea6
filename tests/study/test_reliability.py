"""Issue #15 (reliability round 2): one test per reproducible defect (rows 1-11 and 14-18; rows 12
and 13 belong to calibration and validation). Each uses a one-GPU Qwen2.5-3B scenario whose runs
take well under a second."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from small_sweep import TINY_SYNC
from typer.testing import CliRunner

from specsim import atomic
from specsim.cli.app import app
from specsim.errors import SpecError, short_repr
from specsim.scenario import MAX_SWEEP_ROWS, ScenarioError, load_scenario
from specsim.study import executors
from specsim.study.executors import check_backend
from specsim.study.report import plots
from specsim.study.results_folder import ResultsConflict
from specsim.study.runner import run_scenario, show_scenario

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "specsim" / "catalog" / "hardware_profiles" / "h100_sxm.yaml"

TINY = {**TINY_SYNC, "sweep": {"speculation.k": [0, 2]}}


def tiny(folder: Path, **changes) -> Path:
    doc = json.loads(json.dumps(TINY))
    for k, v in changes.items():
        doc[k] = v
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path, out, *sets, **kw):
    return run_scenario(path, list(sets), out=out, jobs=1, progress=False, **kw)


def cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "Traceback" not in text and "internal error" not in text, text
    return res, text


# ============================================================================ row 1
def test_row01_edited_profile_is_recomputed_not_reused(tmp_path):
    prof = tmp_path / "myprof.yaml"
    shutil.copy(PROFILE, prof)
    path = tiny(tmp_path, hardware=str(prof))
    first = run(path, tmp_path / "D")
    before = first.points()
    again = run(path, tmp_path / "D")
    assert again.computed_runs == 0 and again.warnings == []
    doc = yaml.safe_load(prof.read_text())
    doc["hbm_tbps"]["value"] = doc["hbm_tbps"]["value"] / 3.35   # a third of the bandwidth
    prof.write_text(yaml.safe_dump(doc, sort_keys=False))
    edited = run(path, tmp_path / "D")
    assert edited.reused_runs == 0 and edited.computed_runs == first.computed_runs
    assert any("hardware" in w for w in edited.warnings)
    after = edited.points()
    assert (after["generation_s"] > before["generation_s"] * 1.2).all()   # a third of the bandwidth: slower


def test_row01_edited_length_file_and_catalog_entry_are_recomputed(tmp_path, monkeypatch):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("length\n" + "\n".join(str(20 + 7 * i) for i in range(40)) + "\n")
    path = tiny(tmp_path, workload={**TINY["workload"], "response_tokens": {"kind": "empirical",
                                                                           "path": "lengths.csv"}})
    first = run(path, tmp_path / "D")
    lengths.write_text("length\n" + "\n".join(str(60 + 7 * i) for i in range(40)) + "\n")
    edited = run(path, tmp_path / "D")
    assert edited.reused_runs == 0 and edited.computed_runs == first.computed_runs
    assert any("workload.response_tokens" in w for w in edited.warnings)
    # a changed catalog entry for the model changes every run key
    import dataclasses

    from specsim.catalog import models as model

    real = model.load_model
    monkeypatch.setattr(model, "load_model", lambda name: dataclasses.replace(real(name), layers=real(name).layers + 1))
    changed = run(path, tmp_path / "D")
    assert changed.reused_runs == 0 and any("model" in w for w in changed.warnings)


def test_row01_specsim_version_is_part_of_the_key(tmp_path, monkeypatch):
    path = tiny(tmp_path)
    run(path, tmp_path / "D")
    import specsim

    monkeypatch.setattr(specsim, "__version__", "99.0")
    res = run(path, tmp_path / "D")
    assert res.reused_runs == 0 and any("specsim" in w for w in res.warnings)


# ============================================================================ row 2
def test_row02_huge_sweeps_are_refused_before_anything_runs(tmp_path):
    path = tiny(tmp_path)
    t0 = time.perf_counter()
    with pytest.raises(ScenarioError, match=r"sweep\.replicates"):
        load_scenario(path, ["sweep={speculation.k: [0,1,2,3,4,5,6,7,8,9], replicates: 1000000}"])
    six = "{" + ", ".join(f"{p}: [{', '.join(str(v) for v in vals)}]" for p, vals in [
        ("speculation.k", range(10)), ("seed", range(10)), ("workload.prompts", range(1, 11)),
        ("workload.group_size", range(1, 11)), ("rollout.max_batch", range(1, 11)),
        ("speculation.k_max", range(1, 11))]) + "}"
    with pytest.raises(ScenarioError, match=r"sweep: at most 10,000 rows .*1,000,000 rows"):
        load_scenario(path, [f"sweep={six}"])
    assert time.perf_counter() - t0 < 5
    res, text = cli("check", path, "--set", f"sweep={six}")
    assert res.exit_code == 2 and "sweep" in text
    res, text = cli("show", "scenario", path, "--set", f"sweep={six}")
    assert res.exit_code == 2 and "sweep" in text
    res, text = cli("run", path, "--set", f"sweep={six}", "--out", tmp_path / "D")
    assert res.exit_code == 2 and not (tmp_path / "D").exists()
    # check and show scenario report the count
    res, text = cli("check", path, "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["sweep_rows"] == 2
    info = show_scenario(path)
    assert info["rows"] == 2 and info["max_rows"] == MAX_SWEEP_ROWS


# ============================================================================ row 3
def test_row03_off_stays_a_policy_name(tmp_path):
    path = tmp_path / "s.yaml"
    text = yaml.safe_dump({k: v for k, v in TINY.items() if k != "sweep"}, sort_keys=False)
    path.write_text(text + "sweep: {speculation.policy: [off, always]}\n")
    sc = load_scenario(path)
    assert sc.sweep["speculation.policy"] == ["off", "always"]
    res = run(path, tmp_path / "D")
    df = res.points()
    assert list(df["speculation.policy"]) == ["off", "always"]
    assert (tmp_path / "D" / "points.csv").is_file()
    path.write_text(text.replace("policy: always", "policy: off"))
    assert load_scenario(path).speculation.policy == "off"
    for word in ("yes", "on", "1"):   # issue 46: a boolean field takes true or false only, never a coercion
        with pytest.raises(ScenarioError, match="true or false"):
            load_scenario(path, [f"pipeline.partial_rollouts={word}"])
    assert load_scenario(path, ["pipeline.partial_rollouts=true"]).pipeline.partial_rollouts is True


# ============================================================================ row 4
def test_row04_billion_laughs_fails_fast_with_a_bounded_message(tmp_path):
    lol = "a: &a [" + ", ".join(['"lol"'] * 9) + "]\n"
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        lol += f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    lol += "rollout: *i\n"
    path = tmp_path / "lol.yaml"
    path.write_text(lol)
    assert len(lol) < 700
    t0 = time.perf_counter()
    res, text = cli("check", path)
    assert res.exit_code == 2 and time.perf_counter() - t0 < 5
    assert "aliases" in text and len(text) < 600
    # the repr of a huge shared value is bounded too
    v = ["x"] * 10
    for _ in range(12):
        v = [v] * 10
    t0 = time.perf_counter()
    assert len(short_repr(v)) <= 120 and time.perf_counter() - t0 < 0.1
    assert len(str(ScenarioError("f", "rollout", v, "a mapping"))) < 300


def test_row04_ordinary_anchors_aliases_and_merge_keys_still_work(tmp_path):
    body = yaml.safe_dump({k: v for k, v in TINY.items() if k not in ("workload", "sweep")}, sort_keys=False)
    text = body + """
workload:
  prompts: 2
  group_size: 2
  max_response_tokens: 128
  prompt_tokens: &short {kind: fixed, tokens: 32}
  response_tokens:
    <<: {kind: lognormal, median: 40}
    p99: 120
sweep: {workload.prompt_tokens: [*short, {kind: fixed, tokens: 16}]}
"""
    path = tmp_path / "anchors.yaml"
    path.write_text(text)
    sc = load_scenario(path)
    assert sc.workload.response_tokens.p99 == 120 and sc.rows == 2
    res, _ = cli("check", path)
    assert res.exit_code == 0


# ============================================================================ row 5
@pytest.mark.parametrize("garbage", ["{}", "[]", "null", '{"key": "x"}', "not json"])
def test_row05_corrupted_result_files_are_recomputed(tmp_path, garbage):
    path = tiny(tmp_path)
    out = tmp_path / "D"
    run(path, out)
    good = (out / "points.csv").read_bytes()
    point = min((out / "points").glob("*.json"))
    runs = sorted((out / "runs").glob("*.json"))
    point.write_text(garbage)
    for f in runs:
        f.write_text(garbage)     # points, baselines and the capacity plan's runs
    res = run(path, out)
    assert res.computed_runs == len(runs)
    assert (out / "points.csv").read_bytes() == good
    assert any(point.name in w for w in res.warnings) and any("runs/" in w for w in res.warnings)
    res, _ = cli("run", path, "--out", out)
    assert res.exit_code == 0


def test_row05_a_point_made_from_other_runs_is_not_reused(tmp_path):
    path = tiny(tmp_path)
    out = tmp_path / "D"
    run(path, out)
    f = min((out / "points").glob("*.json"))
    doc = json.loads(f.read_text())
    doc["runs"]["baseline"] = "0" * 16
    f.write_text(json.dumps(doc))
    res = run(path, out)
    assert any("other runs" in w for w in res.warnings) and res.computed_runs == 0


# ============================================================================ row 6
def test_row06_duplicate_sweep_values_are_refused_naming_sweep(tmp_path):
    path = tiny(tmp_path)
    with pytest.raises(ScenarioError, match=r"sweep\.speculation\.k: each swept value once \(3 is given twice"):
        load_scenario(path, ["sweep={speculation.k: [0, 3, 3]}"])
    res, text = cli("run", path, "--set", "sweep={speculation.k: [0, 3, 3]}", "--out", tmp_path / "D")
    assert res.exit_code == 2 and "sweep.speculation.k" in text and not (tmp_path / "D").exists()
    with pytest.raises(ScenarioError, match=r"sweep\.zip"):
        load_scenario(path, [("sweep={speculation.k: [1, 1], speculation.k_max: [2, 2], "
                              "zip: [[speculation.k, speculation.k_max]]}")])
    # zipped lists may repeat a value as long as the tuples differ
    sc = load_scenario(path, [("sweep={speculation.k: [1, 1], speculation.k_max: [2, 3], "
                               "zip: [[speculation.k, speculation.k_max]]}")])
    assert sc.rows == 2


# ============================================================================ row 7
def test_row07_jobs_are_capped_at_the_cpus(tmp_path, monkeypatch):
    import specsim.study.executors as ex

    monkeypatch.setattr(ex, "available_cpus", lambda: 2)
    assert check_backend("local", 60) == 2 and check_backend("local", 1) == 1
    path = tiny(tmp_path)
    res = run_scenario(path, [], out=tmp_path / "D", jobs=60, progress=False)
    assert res.summary["run"]["jobs"] == 2 and any("capped at 2" in w for w in res.warnings)


# ============================================================================ rows 8 and 9
class FakeRay:
    def __init__(self):
        self.calls = []

    def is_initialized(self):
        return False

    def init(self, **kw):
        self.calls.append(kw)

    def shutdown(self):
        self.calls.append("shutdown")

    def remote(self, **kw):
        raise AssertionError("not reached: no tasks")


def test_row08_ray_without_address_starts_a_private_local_instance(monkeypatch):
    from specsim.study import executors

    fake = FakeRay()
    monkeypatch.setattr(executors, "execute", lambda t: {"key": t.key, "error": "x"})

    class Remote:
        def __init__(self, fn):
            self.fn = fn

        def remote(self, task):
            return ("ref", task["key"])

    fake.remote = lambda **kw: (lambda fn: Remote(fn))
    fake.wait = lambda pending, num_returns: (pending[:1], pending[1:])
    fake.get = lambda ref: {"key": ref[1], "error": "x"}
    from specsim.study.sweep import RunTask

    got = []
    executors._run_ray(fake, [RunTask("k1", {}, None, 0)], lambda t, r: got.append(r) or [], 2, None)
    assert fake.calls[0]["address"] == "local" and fake.calls[0]["num_cpus"] == 2 and fake.calls[-1] == "shutdown"
    assert got == [{"key": "k1", "error": "x"}]
    # a delivery's follow-ups (run_tasks' follow_up) run on Ray too, behind the queued tasks
    got.clear()
    follow = {"k1": [RunTask("k3", {}, None, 0)]}
    executors._run_ray(fake, [RunTask("k1", {}, None, 0), RunTask("k2", {}, None, 0)],
                       lambda t, r: got.append(r["key"]) or follow.pop(t.key, []), 1, None)
    assert got == ["k1", "k2", "k3"]


def test_row09_unreachable_ray_address_fails_fast_naming_address(monkeypatch, tmp_path):
    from specsim.study import executors

    monkeypatch.setattr(executors, "_ray", lambda: FakeRay())
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match="--address.*nothing answers"):
        check_backend("ray", 2, "127.0.0.1:1")
    with pytest.raises(SpecError, match="--address"):
        check_backend("ray", 2, "no-port-here")
    assert time.perf_counter() - t0 < 10
    check_backend("ray", 2, "auto")   # left to Ray
    path = tiny(tmp_path)
    with pytest.raises(SpecError, match="--address"):
        run_scenario(path, [], out=tmp_path / "D", backend="ray", address="127.0.0.1:1", progress=False)
    assert not (tmp_path / "D").exists()


# ============================================================================ row 11
def test_row11_force_deletes_only_its_own_files_and_names_the_others(tmp_path):
    path = tiny(tmp_path)
    out = tmp_path / "D"
    run(path, out)
    (out / "runs" / "my_notes.txt").write_text("mine")
    (out / "plots").mkdir(exist_ok=True)
    (out / "plots" / "figure1.png").write_bytes(b"png")
    with pytest.raises(ResultsConflict) as first:
        run(path, out, "workload.prompts=3")
    msg = str(first.value)
    assert "--out" in msg and "--force" in msg and "got None" not in msg
    with pytest.raises(ResultsConflict, match=r"--force.*runs/my_notes.txt.*plots/figure1.png|--force.*plots/figure1"
                                              r".png.*runs/my_notes.txt"):
        run(path, out, "workload.prompts=3", force=True)
    assert (out / "runs" / "my_notes.txt").is_file() and (out / "plots" / "figure1.png").is_file()
    (out / "runs" / "my_notes.txt").unlink()
    (out / "plots" / "figure1.png").unlink()
    (out / "notes.md").write_text("top-level files of the user are never touched")
    res = run(path, out, "workload.prompts=3", force=True)
    assert res.reused_runs == 0 and (out / "notes.md").is_file()


# ============================================================================ row 14
def test_row14_results_files_have_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = tiny(tmp_path)
        run(path, tmp_path / "D")
        files = [p for p in (tmp_path / "D").rglob("*") if p.is_file()]
        assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
        os.umask(0o077)
        assert stat.S_IMODE(atomic.write_text(tmp_path / "private.txt", "x").stat().st_mode) == 0o600
    finally:
        os.umask(old)


# ============================================================================ row 15
def test_row15_bad_out_paths_name_out(tmp_path):
    path = tiny(tmp_path)
    (tmp_path / "file").write_text("x")
    for bad in ("/proc/specsim-x", str(tmp_path / "file" / "sub"), str(tmp_path / "file")):
        with pytest.raises(ResultsConflict, match="--out"):
            run(path, bad)
        res, text = cli("run", path, "--out", bad)
        assert res.exit_code == 2 and "--out" in text


# ============================================================================ row 16
def test_row16_messages_for_nan_sweep_case_and_check(tmp_path):
    path = tiny(tmp_path)
    for bad in ("drafter.tau=nan", "drafter.tau=.nan", "workload.temperature=.inf"):
        with pytest.raises(ScenarioError, match="finite number"):
            load_scenario(path, [bad])
    with pytest.raises(ScenarioError, match=r"sweep\.speculation\.k.*<= 32"):
        load_scenario(path, ["sweep={speculation.k: [0, 99]}"])
    assert load_scenario(path, ["hardware=GB200"]).hardware == "gb200"
    assert load_scenario(path, ["hardware=H100_SXM"]).hardware == "h100_sxm"
    res, text = cli("check", path, "--set", "pipeline.baseline={speculation.kk: 3}")
    assert res.exit_code == 2 and "pipeline.baseline" in text and "speculation.k" in text
    res, text = cli("check", path, "--set", "pipeline.baseline={speculation.k: 99}")
    assert res.exit_code == 2 and "pipeline.baseline" in text
    # a point that cannot run (tp not dividing the heads) is refused by check, as by run, naming sweep
    res, text = cli("check", path, "--set", "sweep={rollout.tp: [1, 3]}", "--set", "rollout.gpus=3")
    assert res.exit_code == 2 and "sweep" in text and "rollout.tp" in text
    res2, text2 = cli("run", path, "--set", "sweep={rollout.tp: [1, 3]}", "--set", "rollout.gpus=3",
                      "--out", tmp_path / "D")
    assert res2.exit_code == 2 and text2 == text


def test_row16_values_valid_only_together_are_accepted(tmp_path):
    path = tiny(tmp_path)
    zipped = "sweep={drafter.alpha: [null, 0.5], drafter.tau: [2.0, null], zip: [[drafter.alpha, drafter.tau]]}"
    assert load_scenario(path, [zipped]).rows == 2
    assert load_scenario(path, ["sweep={drafter.alpha: [0.5], drafter.tau: [null]}"]).rows == 1
    with pytest.raises(ScenarioError, match=r"sweep\.zip"):
        load_scenario(path, [("sweep={drafter.alpha: [null, 0.5], drafter.tau: [2.0, 2.5], "
                              "zip: [[drafter.alpha, drafter.tau]]}")])


def test_row03_mixed_type_columns_still_write_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"x": ["off", {"kind": "fixed"}, 3], "y": [1.0, 2.0, 3.0]})
    atomic.write_parquet(tmp_path / "p.parquet", frame)
    back = pd.read_parquet(tmp_path / "p.parquet")
    assert list(back["x"]) == ["off", '{"kind": "fixed"}', "3"] and list(back["y"]) == [1.0, 2.0, 3.0]


# ============================================================================ row 17
def test_row17_strict_ints_names_inside_output_dir_and_address(tmp_path):
    path = tiny(tmp_path)
    with pytest.raises(ScenarioError, match=r"speculation\.k: a whole number"):
        load_scenario(path, ["speculation.k=true"])
    with pytest.raises(ScenarioError, match=r"drafter\.tau: a number"):
        load_scenario(path, ["drafter.tau=false"])
    for name in ("../../x", "a/b", ".hidden", ""):
        with pytest.raises(ScenarioError, match="name"):
            load_scenario(path, [f"name={name}"])
    with pytest.raises(SpecError, match="--address"):
        check_backend("local", 2, "10.0.0.1:6379")
    res, text = cli("run", path, "--backend", "local", "--address", "X", "--out", tmp_path / "D")
    assert res.exit_code == 2 and "--address" in text and not (tmp_path / "D").exists()
    out_dir = tmp_path / "results"
    res = run_scenario(path, [f"output.dir={out_dir}"], jobs=1, progress=False)
    assert Path(res.out_dir).resolve().parent == out_dir.resolve()


# ============================================================================ row 18
def test_row18_rising_step_time_is_flagged():
    from specsim.study.report.summary import summary_markdown
    from specsim.study.report.tables import capacity_notes

    rows = [{"variant": "ar", "rollout_gpus": n, "step_s": s} for n, s in ((1024, 130.0), (1536, 100.0), (2048, 110.0))]
    rows += [{"variant": "sd", "rollout_gpus": n, "step_s": s} for n, s in ((1024, 90.0), (1536, 80.0), (2048, 79.0))]
    notes = capacity_notes(rows)
    assert len(notes) == 1 and "AR step time rises from 100.0 s at 1536 to 110.0 s at 2048" in notes[0]
    s = {"scenario": "x", "description": "", "model": "m", "hardware": "h", "seed": 0, "specsim_version": "0",
         "combinations": 1, "replicates": 1, "rows": 1, "swept": {}, "baseline": {"overrides": {}, "mode": "sync",
         "is_sync_ar": True}, "sync_ar": {"definition": "", "is_baseline": True}, "ci": "", "points": [],
         "capacity": {"rows": [{**r, "total_gpus": r["rollout_gpus"], "gpu_hours_per_1000_steps": 1.0, "error": ""}
                               for r in rows], "notes": notes, "k": 3, "has_sd": True, "reference_point": 0,
                      "sizes": [1024, 1536, 2048], "gpus_per_engine": 8, "target_step_s": None, "minimum": {}},
         "resolved_scenario": {}}
    assert "**note**: AR step time rises" in summary_markdown(s)


def test_row18_a_rise_inside_the_replicates_spread_is_not_flagged():
    """With per-replicate (paired) step times the note needs the paired ratio's 95 % interval to
    lie above 1: a mean rise that some replicate contradicts is noise; one every replicate shows is not."""
    from specsim.study.report.tables import capacity_notes

    def rows(small, large):
        return [{"variant": "sd", "rollout_gpus": n, "step_s": sum(v) / len(v),
                 "step_s_by_replicate": {str(i): x for i, x in enumerate(v)}} for n, v in ((384, small), (768, large))]

    assert capacity_notes(rows([111.4, 108.4, 130.0], [128.8, 108.4, 117.4])) == []   # +1.4 % on the means
    notes = capacity_notes(rows([100.0, 110.0, 120.0], [110.0, 121.0, 132.5]))          # +10 % in each replicate
    assert len(notes) == 1 and "paired over 3 replicates" in notes[0]
    # one replicate: the means, as before
    assert len(capacity_notes(rows([100.0], [110.0]))) == 1


def test_capacity_plan_can_be_switched_off_and_its_replicates_set(tmp_path):
    path = tiny(tmp_path)
    res = run(path, tmp_path / "none", "output.capacity.rollout_gpus=[]")
    s = json.loads((Path(res.out_dir) / "summary.json").read_text())
    assert s["capacity"]["rows"] == [] and "Capacity plan" not in (Path(res.out_dir) / "summary.md").read_text()
    assert not any("capacity" in r for r in pd.read_csv(Path(res.out_dir) / "runs.csv")["role"])
    res = run(path, tmp_path / "one", "output.capacity.rollout_gpus=[1]", "output.capacity.replicates=2",
              "sweep.replicates=1")
    cap = json.loads((Path(res.out_dir) / "summary.json").read_text())["capacity"]
    assert cap["replicates"] == 2 and {r["replicates"] for r in cap["rows"]} == {2}
    r, text = cli("check", path, "--set", "output.capacity.replicates=0")
    assert r.exit_code == 2 and "output.capacity.replicates" in text and "0" in text
    # the plan's runs are bounded like the sweep's rows: 4 default sizes × 2 × 2000 sweep replicates
    r, text = cli("check", path, "--set", "sweep={speculation.k: [2], replicates: 2000}")
    assert r.exit_code == 2 and "output.capacity.replicates" in text and "4 × 2 × 2000" in text
    r, _ = cli("check", path, "--set", "sweep={speculation.k: [2], replicates: 2000}",
               "--set", "output.capacity.rollout_gpus=[]")
    assert r.exit_code == 0
    r, _ = cli("check", path, "--set", "sweep={speculation.k: [2], replicates: 2000}",
               "--set", "output.capacity.replicates=3")
    assert r.exit_code == 0


def test_row18_a_tie_goes_to_the_simpler_configuration(tmp_path):
    from specsim.study.report.tables import analyse
    from specsim.study.sweep import row_columns

    sc = load_scenario(tiny(tmp_path), ["sweep={speculation.k: [0, 1, 2]}"])
    cols = row_columns(["speculation.k"])

    def row(point, k, speedup):
        r = {c: 1.0 for c in cols}
        r.update({"point": point, "point_id": f"p{point}", "replicate": 0, "seed": 0, "speculation.k": k, "k": k,
                  "mode": "sync", "sd_policy": "off" if k == 0 else f"always(k={k})", "policy_lag": 0,
                  "e2e_speedup_vs_sync_ar": speedup, "step_s": 100 / speedup})
        return r

    tie = analyse(sc, [row(0, 0, 1.0), row(1, 1, 1.0), row(2, 2, 1.002)], cols)
    assert tie["best"]["k"] == 0
    clear = analyse(sc, [row(0, 0, 1.0), row(1, 1, 1.0), row(2, 2, 1.05)], cols)
    assert clear["best"]["k"] == 2


def test_best_vs_runner_up_is_paired_over_replicates(tmp_path):
    """The best point against the runner-up: the ranking metric's ratio per replicate (paired
    draws). A lead every replicate shows is separated even when the per-point intervals overlap;
    a lead one replicate reverses is not, and the summary says the two are not ranked."""
    from specsim.study.report.summary import runner_up_text
    from specsim.study.report.tables import analyse
    from specsim.study.sweep import row_columns

    sc = load_scenario(tiny(tmp_path), ["sweep={speculation.k: [0, 1, 2]}"])
    cols = row_columns(["speculation.k"])

    def rows(speedups):
        out = []
        for point, per_rep in enumerate(speedups):
            for rep, x in enumerate(per_rep):
                r = {c: 1.0 for c in cols}
                r.update({"point": point, "point_id": f"p{point}", "replicate": rep, "seed": rep,
                          "speculation.k": point, "k": point, "mode": "sync", "policy_lag": 0,
                          "sd_policy": "off" if point == 0 else f"always(k={point})",
                          "e2e_speedup_vs_sync_ar": x, "step_s": 100 / x})
                out.append(r)
        return out

    # replicate-to-replicate spread 1.0 .. 2.0, point 2 ahead of point 1 by 5 % in every replicate
    clear = analyse(sc, rows([[0.9, 1.4, 1.9], [1.0, 1.5, 2.0], [1.05, 1.575, 2.1]]), cols)
    m = clear["best_vs_runner_up"]
    assert clear["best"]["point"] == 2 and m["runner_up"] == 1 and m["replicates"] == 3
    assert m["ratio"]["mean"] == pytest.approx(1.05) and m["separated"]
    assert clear["points"][2]["e2e_speedup_vs_sync_ar"]["ci95"][0] < clear["points"][1]["e2e_speedup_vs_sync_ar"]["mean"]
    mixed = analyse(sc, rows([[0.9, 1.4, 1.9], [1.0, 1.5, 2.0], [1.2, 1.4, 2.1]]), cols)
    m = mixed["best_vs_runner_up"]
    assert mixed["best"]["point"] == 2 and not m["separated"]
    assert "contains 1" in runner_up_text(m, "e2e_speedup_vs_sync_ar", "k=1")
    one = analyse(sc, rows([[1.0], [1.1], [1.2]]), cols)["best_vs_runner_up"]
    assert one["replicates"] == 1 and not one["separated"]
    assert "one replicate" in runner_up_text(one, "e2e_speedup_vs_sync_ar", "k=1")


# ============================================================================ #14: layers of the run
def _imports(module_file: Path) -> set[str]:
    import ast

    tree = ast.parse(module_file.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_runner_uses_no_private_sweep_names_and_plots_simulate_nothing():
    pkg = ROOT / "specsim"
    runner = _imports(pkg / "study/runner.py")
    assert not [m for m in runner if m.startswith("specsim.study.sweep._")]
    plots = _imports(pkg / "study" / "report" / "plots.py")
    assert not [m for m in plots if m.startswith(("specsim.sim", "specsim.world.resolve", "specsim.scenario",
                                                  "specsim.study.sweep", "specsim.study.runner", "specsim.study.timeline"))]
    # one place checks --backend / --jobs / --address
    for f in ("study/runner.py", "study/sweep.py", "study/capacity.py", "study/results_folder.py"):
        assert "'local' or 'ray'" not in (pkg / f).read_text()


def test_plots_are_drawn_from_the_persisted_timeline(tmp_path):
    path = tiny(tmp_path, output={"plots": True})
    out = tmp_path / "D"
    run(path, out)
    tl = pd.read_csv(out / "timeline.csv")
    assert set(tl["variant"]) == {"AR", "SD"} and (out / "plots" / "rollout_timeline.png").is_file()
    assert pd.read_csv(out / "plots" / "rollout_timeline.csv").equals(tl)
    stamp = (out / "timeline.csv").stat().st_mtime_ns
    again = run(path, out)
    assert again.computed_runs == 0 and (out / "timeline.csv").stat().st_mtime_ns == stamp   # reused


def test_the_sweeps_figures_are_drawn_while_the_capacity_runs_execute(tmp_path, monkeypatch):
    """The plots that need only the sweep start before the capacity plan's runs and draw while
    they run (runner._SweepFigures): here the drawing waits for a capacity run and that run waits
    for the drawing to have started, so drawing them after the runs fails both waits."""
    started, capacity_ran = threading.Event(), threading.Event()
    real_plots, real_execute = plots.sweep_plots, executors.execute

    def drawing(*args, **kwargs):
        started.set()
        assert capacity_ran.wait(20), "no capacity run executed while the sweep's figures were drawn"
        return real_plots(*args, **kwargs)

    def executing(task, *args, **kwargs):
        if task.role == "capacity" and not capacity_ran.is_set():
            assert started.wait(20), "a capacity run started before the sweep's figures"
            capacity_ran.set()
        return real_execute(task, *args, **kwargs)

    monkeypatch.setattr(plots, "sweep_plots", drawing)
    monkeypatch.setattr(executors, "execute", executing)
    res = run(tiny(tmp_path, output={"plots": True}), tmp_path / "D")
    assert capacity_ran.is_set()
    assert list(res.summary["plots"]) == ["speedup_vs_k", "rollout_timeline", "step_breakdown", "capacity_plan"]
    assert all((res.out_dir / "plots" / name).is_file() for name in res.summary["plots"].values())


def test_a_figure_that_fails_is_the_runs_error_and_leaves_the_folder_usable(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the drawing failed")

    path, out = tiny(tmp_path, output={"plots": True}), tmp_path / "D"
    monkeypatch.setattr(plots, "sweep_plots", broken)
    with pytest.raises(RuntimeError, match="the drawing failed"):
        run(path, out)
    monkeypatch.undo()
    again = run(path, out)                                  # the lock was released; every run is reused
    assert again.computed_runs == 0 and (out / "plots" / "capacity_plan.png").is_file()
