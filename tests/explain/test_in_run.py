"""The ladder in a `specsim run` summary (specsim/explain/in_run.py): off by default (the block gives
the facts and the command), with `output.explain: ladder` computed into `explain/`, equal to what
`specsim explain` gives for the command the summary prints, reused on a resumed run, discarded
by --fresh."""

import copy
import json

import pytest
import yaml
from typer.testing import CliRunner

from specsim.cli.app import app
from specsim.explain import in_run
from specsim.explain.in_run import run_and_explain
from specsim.explain.ladder import explain
from tests.small_sweep import TINY_SYNC


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = copy.deepcopy(TINY_SYNC)
    d["drafter"].update(heterogeneity=5.0)
    d["pipeline"]["steps"] = 3
    d["sweep"] = {"speculation.k": [0, 2], "replicates": 2}
    f = tmp_path_factory.mktemp("in_run") / "tiny.yaml"
    f.write_text(yaml.safe_dump(d))
    return str(f)


def test_default_gives_the_facts_and_the_command_only(tiny, tmp_path):
    res = run_and_explain(tiny, out=tmp_path / "r", jobs=1, progress=False)
    block = res.summary["explain"]
    assert block["ladder_requested"] is False and block["ladder"] is None
    assert not (tmp_path / "r" / "explain").exists()
    assert block["k"] == 2 and block["values"] == {"speculation.k": 2}
    assert block["command"] == f"specsim explain {tiny} --point k=2 --replicates 2"
    md = (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")
    assert "## Where the gain comes from" in md and f"`{block['command']}`" in md
    assert "output.explain: ladder" in md


def test_opt_in_ladder_is_the_commands_ladder_and_resumes(tiny, tmp_path, monkeypatch):
    out = tmp_path / "r"
    sets = ["output.explain=ladder"]
    res = run_and_explain(tiny, sets, out=out, jobs=1, progress=False)
    block = res.summary["explain"]
    lad = block["ladder"]
    assert block["ladder_requested"] and lad["replicates"] == 2 and lad["pipeline_runs"] > 0
    call = block["call"]
    assert call["sets"] == sets and call["point"] == "k=2"
    # the ladder the summary holds is the one the printed command gives (same draws, same runs)
    e = explain(call["scenario"], call["sets"], point=call["point"], replicates=call["replicates"], jobs=1)
    assert [r["gain"]["mean"] for r in lad["rungs"]] == [r["gain"]["mean"] for r in e.ladder]
    # its last rung is the run's own SD gain for that point (the same runs)
    assert lad["rungs"][-1]["gain"]["mean"] == pytest.approx(block["measured"]["e2e_speedup"]["mean"], rel=1e-12)
    for f in ("explain.md", "explain.json", "ladder.csv", "shapley.csv", "waterfall.png", "report.html",
              in_run.LADDER_FILE):
        assert (out / "explain" / f).is_file(), f
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "The ladder (2 paired replicate(s)" in md and "acceptance ceiling" in md and "Shapley shares" in md
    saved = json.loads((out / "summary.json").read_text())
    assert saved["explain"]["ladder"]["rungs"][0]["rung"] == "ceiling"

    # its runs are in the run's own runs/, beside the sweep's: the point's own runs were reused
    stored = {f.stem for f in (out / "runs").glob("*.json")}
    assert len(stored) > res.computed_runs and lad["pipeline_runs"] > 0
    assert res.summary["run"]["computed_runs"] == res.computed_runs

    # a resumed run reuses the stored ladder: explain is not called again
    def refuse(*a, **k):
        raise AssertionError("the ladder was recomputed on a resumed run")

    monkeypatch.setattr("specsim.explain.ladder.explain", refuse)
    again = run_and_explain(tiny, sets, out=out, jobs=1, progress=False)
    assert again.summary["explain"]["ladder"] == json.loads(json.dumps(lad))
    # --fresh discards it with the rest of the folder's results
    monkeypatch.undo()
    from specsim.study import results_folder

    results_folder.prepare(out, (out / "resolved.yaml").read_text(), force=False, fresh=True)
    assert not (out / "explain" / in_run.LADDER_FILE).exists()


def test_the_ladder_runs_under_the_runs_own_lock_and_reuses_its_runs(tiny, tmp_path, monkeypatch):
    """One lock for the run and its ladder (no second FolderLock); the ladder computes no run the
    sweep already computed: its plain variant is the best point and its baseline."""
    from specsim import atomic
    from specsim.explain import ladder

    entered: list[str] = []
    real_enter = atomic.FolderLock.__enter__

    def counting(self):
        entered.append(str(self.folder))
        return real_enter(self)

    monkeypatch.setattr(atomic.FolderLock, "__enter__", counting)
    seen: dict = {}
    real_explain = ladder.explain

    def spying(*a, **k):
        e = real_explain(*a, **k)
        seen["e"], seen["store"] = e, k["store"]
        return e

    monkeypatch.setattr(ladder, "explain", spying)
    res = run_and_explain(tiny, ["output.explain=ladder"], out=tmp_path / "one", jobs=1, progress=False)
    assert len(entered) == 1 and res.summary["explain"]["ladder"]
    e = seen["e"]
    assert e.computed_runs == e.runs - 2 * e.replicates   # the best point and its baseline per replicate reused
    assert all((tmp_path / "one" / "runs" / f"{k}.json").is_file() for k in seen["store"].runs)


def test_cli_run_prints_the_block_and_json_has_it(tiny, tmp_path):
    res = CliRunner().invoke(app, ["run", tiny, "--out", str(tmp_path / "c"), "--jobs", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "explain (best " in res.stdout and "specsim explain" in res.stdout
    assert "token-weighted" in res.stdout and "finished last" in res.stdout
    res = CliRunner().invoke(app, ["run", tiny, "--out", str(tmp_path / "c"), "--jobs", "1", "--format", "json"])
    assert res.exit_code == 0, res.output
    block = json.loads(res.stdout)["summary"]["explain"]
    keys = set(block) | set(block["measured"]) | set(block["call"])
    assert all(k == k.lower() and " " not in k and "-" not in k for k in keys), keys   # snake_case
    assert {"token_weighted_batch", "per_token_sd_gain", "e2e_speedup", "tau", "step_setter_tau",
            "sync_ar_generation_share", "trainer_cap"} <= set(block["measured"])
    assert isinstance(block["trainer_bound"], bool)
