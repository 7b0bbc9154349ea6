"""One registry of drafter kinds (catalog/drafters.yaml) and no silently dropped drafter settings."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.calibrate.traces.io import DRAFTER_KINDS as TRACE_KINDS
from specsim.catalog.models import (
    DRAFTER_KINDS,
    DrafterKind,
    drafter_arch,
    drafter_kind,
    drafter_kind_names,
    load_model,
)
from specsim.cli.app import app
from specsim.errors import SpecError
from specsim.explain.check import DOCTOR_MAX_TAU
from specsim.scenario import DrafterSection, ScenarioError, load_scenario
from specsim.workload.acceptance.drafter import DrafterAcceptance, Staleness
from specsim.world.resolve import acceptance_model, resolve

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "scenarios" / "8b_rl_think_sync.yaml")
Q8B = load_model("Qwen3-8B")


def test_every_consumer_reads_the_one_registry():
    names = drafter_kind_names()
    assert names == ("eagle3", "mtp", "self_quant", "ngram")
    assert DRAFTER_KINDS == TRACE_KINDS == names
    assert set(DrafterSection.model_fields["kind"].annotation.__args__) == set(names)
    assert set(DOCTOR_MAX_TAU) == set(names)
    for name in names:
        spec = drafter_kind(name)
        assert isinstance(spec, DrafterKind) and spec.name == name and spec.source
        assert DOCTOR_MAX_TAU[name] == spec.plausible_max_tau
        arch = drafter_arch(name, Q8B)
        assert arch.spec is spec
        assert (arch.model is None) == (not spec.gpu_pass)


def test_registry_properties():
    assert drafter_kind("eagle3").goes_stale and drafter_kind("eagle3").retrainable
    assert drafter_kind("eagle3").draft_vocab == 32000 and drafter_kind("eagle3").cost_shape == "head"
    assert not drafter_kind("self_quant").goes_stale and drafter_kind("self_quant").requantized_at_sync
    assert not drafter_kind("ngram").gpu_pass and not drafter_kind("ngram").retrainable
    with pytest.raises(SpecError, match="did you mean 'eagle3'"):
        drafter_kind("eagle")


@pytest.mark.parametrize("kind", ["self_quant", "ngram"])
def test_never_stale_kinds_reject_staleness_and_updates(kind):
    with pytest.raises(SpecError, match="^staleness "):
        DrafterAcceptance(kind, 0.5, staleness=Staleness(0.0, 0.01))
    with pytest.raises(SpecError, match="^update_every_steps "):
        DrafterAcceptance(kind, 0.5, update_every_steps=5)


@pytest.mark.parametrize("overrides,field", [
    (["drafter.kind=ngram", "drafter.staleness.rate_per_version=0.01"], "drafter.staleness.rate_per_version"),
    (["drafter.kind=self_quant", "drafter.update_every_steps=4"], "drafter.update_every_steps"),
    (["drafter.kind=ngram", "drafter.staleness.rate_per_version=null", "drafter.staleness.tau_after=2.0",
      "drafter.staleness.after_versions=10"], "drafter.staleness.tau_after"),
    (["drafter.init=general", "drafter.general_tau=2.0"], "drafter.tau"),
])
def test_silent_changes_are_scenario_errors(overrides, field):
    with pytest.raises(ScenarioError) as e:
        resolve(load_scenario(SCENARIO, overrides))
    assert field in str(e.value)


def test_check_rejects_what_show_drafter_rejects():
    r = CliRunner().invoke(app, ["check", SCENARIO, "--set", "drafter.kind=ngram",
                                 "--set", "drafter.update_every_steps=3"])
    assert r.exit_code == 2 and "drafter.update_every_steps" in r.stderr and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["show", "drafter", "--kind", "ngram", "--tau", "2", "--update-every", "3"])
    assert r.exit_code == 2


def test_zero_staleness_rate_is_not_a_change():
    sc = load_scenario(SCENARIO, ["drafter.kind=ngram", "drafter.staleness.rate_per_version=0.0"])
    assert acceptance_model(sc).staleness.is_never


def test_init_general_uses_general_tau():
    sc = load_scenario(SCENARIO, ["drafter.init=general", "drafter.general_tau=2.0", "drafter.tau=null"])
    acc = acceptance_model(sc)
    assert acc.tau(sc.drafter.tau_at_k) == pytest.approx(2.0, abs=1e-9)
    same = load_scenario(SCENARIO, ["drafter.init=general", "drafter.general_tau=2.0", "drafter.tau=2.0"])
    assert acceptance_model(same) == acc
