"""`run`, `check` and `explain` on mixed GPU pools (`rollout.hardware`, `training.hardware`);
bad pool profiles exit 2 naming the field."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
MIXED = str(ROOT / "scenarios" / "mixed_h100_train_h20_gen.yaml")
SYNC = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
TINY = ["workload.prompts=4", "workload.group_size=4", "workload.max_response_tokens=2048", "pipeline.steps=4",
        "pipeline.warmup_steps=1", "sweep={}"]
runner = CliRunner()


def _sets(extra=()):
    return [a for s in [*TINY, *extra] for a in ("--set", s)]


def _bad(*args):
    r = runner.invoke(app, list(args))
    text = r.output + (r.stderr if r.stderr_bytes is not None else "")
    assert r.exit_code == 2 and "Traceback" not in text, text
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("sets, field", [
    (["training.hardware=h200_sxm"], "training.hardware"),
    (["rollout.hardware=h100_sxm"], "rollout.hardware"),
])
def test_sync_with_two_profiles_exits_2_naming_the_field(sets, field):
    err = _bad("check", SYNC, *[a for s in sets for a in ("--set", s)])
    assert field in err and "async" in err


@pytest.mark.parametrize("field", ["training.hardware", "rollout.hardware"])
def test_an_unknown_pool_profile_exits_2_naming_the_field(field):
    err = _bad("check", MIXED, *_sets([f"{field}=h999"]))
    assert field in err and "h999" in err and "h20" in err


def test_check_reports_both_pools_and_their_memory():
    r = runner.invoke(app, ["check", MIXED, "--format", "json", *_sets()])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert (info["rollout_hardware"], info["training_hardware"]) == ("h20", "h100_sxm")
    gib_gb = 2**30 * 0.991 / 1e9        # a datasheet GB as CUDA gives it, in 10^9 bytes
    assert info["memory_gb_per_gpu"]["hbm_gb"] == pytest.approx(96.0 * gib_gb)        # the engines: H20
    assert info["trainer"]["hardware"] == "h100_sxm"
    assert info["trainer"]["memory_gb_per_gpu"]["hbm"] == pytest.approx(80.0 * gib_gb)  # the trainer: H100
    t = runner.invoke(app, ["check", MIXED, *_sets()])
    assert t.exit_code == 0 and "trained on h100_sxm, generated on h20" in t.stdout
    assert "trainer memory per GPU" in t.stdout and "rollout memory per GPU" in t.stdout


def test_run_accepts_a_mixed_scenario(tmp_path):
    r = runner.invoke(app, ["run", MIXED, "--out", str(tmp_path / "res"), "--no-progress", "-j", "1", "--format",
                            "json", *_sets(["sweep={speculation.k: [0, 3]}"])])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["hardware"] == "h100_sxm (training) + h20 (rollout)"


def test_explain_accepts_a_mixed_scenario():
    """explain's variants of a mixed point validate and resolve, its colocated (async-off) variant
    and that variant's AR baseline on the rollout profile (the full ladder is too slow for a test;
    `specsim explain` on this file at 4 x 4 responses runs in about 30 s)."""
    from specsim.explain.ladder import _baseline_overrides, applicable_factors, variant_overrides
    from specsim.scenario import apply_overrides, load_scenario
    from specsim.world.resolve import resolve

    sc = load_scenario(MIXED, TINY)
    names = {f.name for f in applicable_factors(sc)}
    assert "async" in names
    for on in (frozenset(), frozenset(names), frozenset(names - {"async"})):
        ov = variant_overrides(sc, on)
        for variant in (apply_overrides(sc, ov), apply_overrides(sc, _baseline_overrides(sc, ov))):
            w = resolve(variant)
            assert w.hw.name == "h20"
            if variant.pipeline.mode == "sync":
                assert not w.mixed_hardware


@pytest.mark.long
def test_explain_runs_on_a_mixed_scenario(tmp_path):
    """The ladder itself on 4 x 4 responses (about 30 s on a loaded 2-core machine)."""
    r = runner.invoke(app, ["explain", MIXED, "--replicates", "1", "--steps", "4", "--out", str(tmp_path / "ex"),
                            "-j", "1", *_sets()])
    assert r.exit_code == 0, r.output
    assert "all on the rollout profile (h20)" in r.stdout
    assert (tmp_path / "ex" / "explain.json").is_file()
