"""The CLI's layering: no import cycle between its modules, and the reports it prints come from
library functions that return data (specsim.explain.show, specsim.explain.check)."""

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.errors import SpecError
from specsim.explain.check import check_report, doctor_warnings, max_length_sequences_in_kv
from specsim.explain.show import drafter_acceptance, drafter_report, lengths_report, model_layout, model_report
from specsim.scenario import load_scenario
from specsim.world.resolve import resolve

SCENARIO = str(Path(__file__).resolve().parents[2] / "scenarios" / "8b_rl_think_sync.yaml")


CLI_MODULES = ["specsim.cli.run", "specsim.cli.show", "specsim.cli.common", "specsim.cli.project", "specsim.cli.plan",
               "specsim.cli.calibrate", "specsim.cli.explain"]
#: one interpreter imports each module as a fresh one would: every specsim module is dropped from
#: sys.modules first, so each import runs all of specsim's import statements again (the third-party
#: libraries, which import nothing of specsim, stay loaded: one interpreter start instead of eight)
FRESH_IMPORTS = """
import json, sys
out = {}
for name in sys.argv[1:]:
    for key in [k for k in sys.modules if k == "specsim" or k.startswith("specsim.")]:
        del sys.modules[key]
    __import__(name)
    out[name] = sorted(m for m in sys.modules if m.startswith("specsim.cli."))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cli_modules_imported() -> dict[str, list[str]]:
    """The specsim.cli modules in sys.modules after a fresh import of each CLI module and of the app."""
    r = subprocess.run([sys.executable, "-c", FRESH_IMPORTS, *CLI_MODULES, "specsim.cli.app"], capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("module", CLI_MODULES)
def test_cli_modules_import_without_cli(cli_modules_imported, module):
    """Each CLI module imports in a fresh interpreter without pulling in specsim.cli.app (no cycle)."""
    assert module in cli_modules_imported[module]
    assert "specsim.cli.app" not in cli_modules_imported[module]


def test_cli_imports_every_command_module(cli_modules_imported):
    assert cli_modules_imported["specsim.cli.app"] == [
        "specsim.cli.app", "specsim.cli.calibrate", "specsim.cli.common", "specsim.cli.explain", "specsim.cli.plan",
        "specsim.cli.project", "specsim.cli.run", "specsim.cli.show"]


def test_model_layout_names_the_bad_field():
    moe = load_model("Qwen3-30B-A3B")
    with pytest.raises(SpecError) as e:
        model_layout(moe, tp=1, ep=256)
    assert e.value.field == "layout.ep" and e.value.value == 256 and "128 experts" in e.value.allowed
    with pytest.raises(SpecError) as e:
        model_layout(load_model("Qwen3-8B"), tp=3)
    assert e.value.field == "layout.tp"
    assert model_layout(moe, tp=2, ep=8).gpus == 8


def test_model_report_rows_follow_the_roofline():
    model, hw = load_model("Qwen3-8B"), load_hardware("h100_sxm")
    info = model_report(model, hw, model_layout(model), context=512, max_batch_exp=8, k=3)
    rows = info["rows"]
    assert [r["batch"] for r in rows] == [2**i for i in range(9)]
    # tokens/s is batch / step time; step time grows with the batch, throughput grows too
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(r["batch"] / (r["step_ms"] / 1e3))
    assert all(a["step_ms"] <= b["step_ms"] for a, b in pairwise(rows))
    assert all(a["tokens_per_s"] < b["tokens_per_s"] for a, b in pairwise(rows))
    # a k=3 verify pass costs about one decode pass while memory-bound, and at most k+1 of them
    assert all(1.0 <= r["verify_k3_over_decode"] <= 4.0 + 1e-9 for r in rows)
    assert rows[0]["verify_k3_over_decode"] < 1.15
    # the memory plan adds up: everything but the KV cache and the KV fit usable HBM
    mem = info["memory_gb_per_gpu"]
    parts = mem["weights_gb"] + mem["drafter_weights_gb"] + mem["activations_gb"] + mem["kv_cache_gb"]
    assert parts == pytest.approx(mem["usable_gb"], rel=1e-6)
    assert info["kv_capacity_tokens"] * info["kv_bytes_per_token_per_gpu"] / 1e9 <= mem["kv_cache_gb"] * (1 + 1e-9)


def test_drafter_report_staleness_and_costs():
    target, hw = load_model("Qwen3-8B"), load_hardware("h100_sxm")
    acc = drafter_acceptance("eagle3", tau=3.5, tau_k=3, tau_after=2.0, after_versions=100)
    info = drafter_report(acc, drafter_arch("eagle3", target), target, hw, model_layout(target), k=3,
                          steps=[0, 50, 100], context=1024)
    taus = [r["tau"] for r in info["over_steps"]]
    assert taus[0] == pytest.approx(3.5, rel=1e-6) and taus[-1] == pytest.approx(2.0, rel=1e-6)
    assert taus[0] > taus[1] > taus[2]
    cost = info["cost_batch1"]
    assert cost["draft_over_decode"] == pytest.approx(cost["draft_pass_ms"] / cost["decode_pass_ms"])
    assert cost["sd_step_k3_ms"] > cost["decode_step_ms"]  # three drafts + a verify cost more than one decode


def test_lengths_report_is_the_simulators_draw():
    sc = load_scenario(SCENARIO)
    a = lengths_report(sc, samples=500)
    assert a == lengths_report(sc, samples=500)
    assert a["summary"]["n"] == 500 and a["summary"]["max_tokens"] <= sc.workload.max_response_tokens
    full = lengths_report(sc)
    assert full["summary"]["n"] == sc.workload.prompts * sc.workload.group_size


def test_check_report_summarises_the_world():
    world = resolve(load_scenario(SCENARIO, ["rollout.gpu_memory_utilization=0.22"]))
    info = check_report(world, SCENARIO)
    assert info["engines"] * info["gpus_per_engine"] == info["rollout_gpus"]
    assert info["max_length_sequences_in_kv"] == max_length_sequences_in_kv(world)
    assert info["warnings"] == doctor_warnings(world) and any("KV budget" in w for w in info["warnings"])


def _specsim_imports() -> dict[str, set[str]]:
    """specsim module -> the specsim modules it imports anywhere (top level or inside a function)."""
    import ast

    root = Path(__file__).resolve().parents[2] / "specsim"
    mods = {("specsim." + ".".join(f.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): f
            for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, f in mods.items():
        out: set[str] = set()
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                out |= {n.module} | {f"{n.module}.{a.name}" for a in n.names}
            elif isinstance(n, ast.Import):
                out |= {a.name for a in n.names}
        graph[name] = {m for m in out if m in mods and m != name}
    return graph


def test_no_import_cycle_in_the_package():
    """No module reaches itself through imports, counting imports inside functions (a cycle hidden
    in a function is still a cycle: the CLI had one between cli/app.py and cli/run.py)."""
    graph = _specsim_imports()
    assert graph["specsim.cli.app"] >= {"specsim.cli.calibrate", "specsim.cli.common", "specsim.cli.project",
                                        "specsim.cli.run", "specsim.cli.show"}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join((*path, start)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*path, nxt)))
    assert cycles == []


def test_the_command_line_imports_no_fitter_or_plotting_library():
    """scipy.stats, scipy.optimize and matplotlib load where something is fitted or drawn, not with the
    command line: `specsim --help`, `check` and a run's parent before its pool starts pay for none."""
    code = ("import sys, specsim.cli.app; "
            "print(sorted(m for m in ('scipy.stats', 'scipy.optimize', 'matplotlib') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
