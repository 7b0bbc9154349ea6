"""Fuzzing the scenario front door: generated scenario files, valid and broken, through
`specsim check` and a short `specsim run`.

Valid files (by construction) must check OK and finish a short run. Broken files — wrong types,
unknown keys, out-of-range values, missing sections, non-YAML bytes, huge numbers, layouts that do
not fit, unknown catalog names — must exit 2 with one paragraph naming the file, the field, the
value and what is allowed. No case may print a traceback or an internal error.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shutil
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
import typer.testing
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from small_sweep import TINY_SYNC

from specsim.cli.app import app

N_EXAMPLES = 1000
#: every valid case is checked; one in RUN_EVERY (chosen by the file's CRC, so the same ones every
#: time) is also run: a run costs ~10 valid checks (~180 ms of CPU against ~17 ms; a broken file's
#: check ~3 ms), so 1,000 files (~330 valid) with ~20 runs keep the suite fast; every (mode, policy,
#: drafter kind) combination is run besides by test_every_mode_policy_and_drafter_runs
RUN_EVERY = 16
COUNTS: Counter = Counter()

BASE = {**TINY_SYNC, "name": "fuzz"}

# numeric leaves with a value outside what the schema allows
OUT_OF_RANGE = [
    (("rollout", "gpus"), [0, -1, 10**12]), (("rollout", "tp"), [0, -4]), (("rollout", "max_batch"), [0, 10**9]),
    (("rollout", "gpu_memory_utilization"), [0, 1.5, -0.1]), (("workload", "prompts"), [0, -3, 10**15]),
    (("workload", "group_size"), [0, 10**6]), (("workload", "max_response_tokens"), [0, -10, 10**12]),
    (("workload", "group_correlation"), [-0.1, 1.01]), (("workload", "temperature"), [-1, 3.0]),
    (("drafter", "tau"), [0.5, "above k+1", 1e300]), (("drafter", "alpha"), [1.0, -0.2]),
    (("speculation", "k"), [-1, 33, 10**20]), (("pipeline", "policy_lag"), [-1, 65]),
    (("pipeline", "steps"), [0, 10**9]), (("pipeline", "warmup_steps"), [5, -1]), (("seed",), [-1, 2**70]),
    (("workload", "response_tokens", "median"), [0, -5, 1e12]), (("workload", "response_tokens", "p99"), [10]),
    (("pipeline", "reward_s"), [-1.0, float("inf"), float("nan")]),
]
WRONG_TYPES = ["abc", [1, 2], {"a": 1}, True, None, 1.5]
TYPED_LEAVES = [("rollout", "gpus"), ("rollout", "tp"), ("workload", "prompts"), ("workload", "response_tokens"),
                ("drafter", "kind"), ("speculation", "policy"), ("speculation", "k"), ("pipeline", "mode"),
                ("hardware",), ("model",), ("rollout",), ("drafter",), ("pipeline", "baseline")]
SECTIONS = ["hardware", "model", "rollout", "workload", "drafter"]


def _set(doc, path, value):
    cur = doc
    for part in path[:-1]:
        cur = cur[part]
    cur[path[-1]] = value


@st.composite
def valid_dict(draw):
    doc = copy.deepcopy(BASE)
    doc["seed"] = draw(st.integers(0, 2**31))
    # (model, hardware) pairs whose trainer fits one GPU (16 B/param of state + activations)
    doc["model"], doc["hardware"] = draw(st.sampled_from([
        ("Qwen2.5-3B", "h100_sxm"), ("Qwen2.5-3B", "h200_sxm"), ("Qwen2.5-3B", "b200"), ("Qwen2.5-3B", "gb200"),
        ("Qwen2.5-7B", "gb200"), ("Qwen3-8B", "gb200"), ("Llama-3.1-8B", "b200")]))
    doc["rollout"]["max_batch"] = draw(st.integers(1, 16))
    doc["rollout"]["tp"] = draw(st.sampled_from([1, 2]))
    doc["rollout"]["gpus"] = doc["rollout"]["tp"] * draw(st.integers(1, 2))
    w = doc["workload"]
    w["prompts"] = draw(st.integers(1, 3))
    w["group_size"] = draw(st.integers(1, 3))
    w["max_response_tokens"] = draw(st.integers(16, 256))
    median = draw(st.integers(4, 100))
    w["response_tokens"] = {"kind": "lognormal", "median": median, "p99": median * draw(st.integers(2, 6))}
    w["group_correlation"] = draw(st.floats(0, 1))
    w["temperature"] = draw(st.floats(0, 2))
    kind = draw(st.sampled_from(["eagle3", "mtp", "self_quant", "ngram"]))
    tau_k = draw(st.integers(1, 5))
    doc["drafter"] = {"kind": kind, "tau": round(draw(st.floats(1.0, tau_k + 0.9)), 3), "tau_at_k": tau_k}
    policy = draw(st.sampled_from(["off", "always", "threshold", "adaptive"]))
    doc["speculation"] = {"policy": policy, "k": draw(st.integers(0, 6)), "max_batch": draw(st.integers(1, 16)),
                          "k_max": draw(st.integers(1, 6))}
    mode = draw(st.sampled_from(["sync", "async"]))
    doc["pipeline"] = {"mode": mode, "steps": draw(st.integers(1, 3)), "warmup_steps": 0,
                       "policy_lag": draw(st.integers(0, 3))}
    if mode == "async":
        doc["training"] = {"gpus": draw(st.integers(1, 4))}
    return doc


@st.composite
def valid_doc(draw):
    return "valid", yaml.safe_dump(draw(valid_dict()), sort_keys=False).encode()


@st.composite
def broken_doc(draw):
    """A valid scenario with one thing broken (so the broken cases are as varied as the valid ones)."""
    doc = draw(valid_dict())
    kind = draw(st.sampled_from(["wrong_type", "unknown_key", "out_of_range", "missing_section",
                                 "not_yaml", "huge_number", "does_not_fit", "unknown_name"]))
    if kind == "wrong_type":
        path = draw(st.sampled_from(TYPED_LEAVES))
        value = draw(st.sampled_from(WRONG_TYPES))
        if path in [("workload", "response_tokens"), ("rollout",), ("drafter",), ("pipeline", "baseline")] \
                and isinstance(value, dict):
            value = "abc"
        _set(doc, path, value)
    elif kind == "unknown_key":
        section = draw(st.sampled_from([None, "rollout", "workload", "drafter", "speculation", "pipeline"]))
        key = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=12)) + "_x"
        (doc if section is None else doc[section])[key] = draw(st.integers(0, 9))
    elif kind in ("out_of_range", "huge_number"):
        path, values = draw(st.sampled_from(OUT_OF_RANGE))
        value = draw(st.sampled_from(values))
        if value == "above k+1":
            value = doc["drafter"]["tau_at_k"] + 1.5
        _set(doc, path, value)
        if path == ("drafter", "alpha"):
            doc["drafter"].pop("tau", None)
        if path == ("workload", "response_tokens", "p99"):
            doc["workload"]["response_tokens"]["median"] = 40
    elif kind == "missing_section":
        del doc[draw(st.sampled_from(SECTIONS))]
    elif kind == "not_yaml":
        raw = draw(st.sampled_from([b"\xff\xfe\x00bin", b"rollout: [1, 2\n", b"a: b: c: :\n  - x\n -y",
                                    b"{{{", b"\x00\x01\x02", b"- just\n- a list\n", b"plain text"]))
        return kind, raw
    elif kind == "does_not_fit":
        doc["model"] = "Qwen3-235B-A22B"
        doc["rollout"]["gpus"] = 1
    else:
        if draw(st.booleans()):
            doc["model"] = draw(st.sampled_from(["Qwen3-8b-instruct", "llama-8b", "gpt-5", "Qwen9"]))
        else:
            doc["hardware"] = draw(st.sampled_from(["h100", "H100-SXM", "tpu_v5", "gb300"]))
    return kind, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


@pytest.fixture(scope="module")
def runner():
    """A CliRunner whose Typer→click conversion is done once (it costs ~10 ms per call)."""
    orig = typer.testing._get_command
    typer.testing._get_command = functools.lru_cache(maxsize=None)(orig)
    yield typer.testing.CliRunner()
    typer.testing._get_command = orig
    print(f"\nfuzz: generated {sum(COUNTS.values())} scenario files: "
          + ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items())))


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text and "internal error" not in text, text


@pytest.mark.long
@settings(max_examples=N_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(["valid", "broken", "broken"]).flatmap(
    lambda what: valid_doc() if what == "valid" else broken_doc()))
def test_fuzz_check_and_run(runner, tmp_path_factory, case):
    kind, raw = case
    folder = tmp_path_factory.mktemp("fz")
    path = folder / "scenario.yaml"
    path.write_bytes(raw)
    res = runner.invoke(app, ["check", str(path)])
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    _no_traceback(out)
    if kind == "valid":
        assert res.exit_code == 0, out
        if zlib.crc32(raw) % RUN_EVERY:
            COUNTS["valid (check OK)"] += 1
            return
        run = runner.invoke(app, ["run", str(path), "--out", str(folder / "out"), "--jobs", "1", "--no-progress",
                                  "--format", "json"])
        _no_traceback(run.output)
        assert run.exit_code == 0, run.output
        assert (folder / "out" / "points.csv").is_file()
        COUNTS["valid (check OK, run finished)"] += 1
        return
    assert res.exit_code == 2, out
    err = res.stderr
    assert err.startswith("error: "), err
    assert str(path) in err, err
    assert err.count("\n") <= 1, "one paragraph"
    assert re.search(r"got |must|allowed|needs|unknown|valid YAML", err), err
    COUNTS["invalid: " + kind] += 1


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("policy", ["off", "always", "threshold", "adaptive"])
@pytest.mark.parametrize("kind", ["eagle3", "mtp", "self_quant", "ngram"])
def test_every_mode_policy_and_drafter_runs(runner, tmp_path, mode, policy, kind):
    """Each of the valid generator's 2 x 4 x 4 (pipeline mode, speculation policy, drafter kind)
    combinations checks OK and finishes a short run (the fuzz above runs a CRC-chosen sample)."""
    doc = {**copy.deepcopy(BASE), "drafter": {"kind": kind, "tau": 2.0, "tau_at_k": 3},
           "speculation": {"policy": policy, "k": 2, "max_batch": 8, "k_max": 4},
           "pipeline": {"mode": mode, "steps": 2, "warmup_steps": 0, "policy_lag": 1}}
    if mode == "async":
        doc["training"] = {"gpus": 1}
    path = _write(tmp_path, doc)
    res, out = _check(runner, path)
    assert res.exit_code == 0, out
    run = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--no-progress",
                              "--format", "json"])
    _no_traceback(run.output)
    assert run.exit_code == 0, run.output
    assert (tmp_path / "out" / "points.csv").is_file()
    COUNTS["valid: mode x policy x drafter, run finished"] += 1


# ============================================================================ #15 classes
# Each class below is fuzzed through the CLI with 0 tracebacks; COUNTS gets one entry per case.
POLICY_WORDS = ["off", "on", "yes", "no", "y", "n", "true", "false", "Off", "OFF", "NO", "~", "null", "always",
                "threshold", "adaptive", "'off'", "0", "1", "always ", "[off]", "{a: 1}"]
VALID_POLICIES = {"off", "always", "threshold", "adaptive"}


def _check(runner, path: Path, *sets: str):
    args = ["check", str(path)]
    for s in sets:
        args += ["--set", s]
    res = runner.invoke(app, args)
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    _no_traceback(out)
    return res, out


def _write(folder: Path, doc: dict, extra: str = "") -> Path:
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False) + extra)
    return path


@settings(max_examples=120, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(depth=st.integers(1, 12), width=st.integers(1, 12), where=st.sampled_from(["rollout", "sweep", "description",
                                                                                    "drafter", "top"]))
def test_fuzz_aliases(runner, tmp_path_factory, depth, width, where):
    """Anchor/alias trees of width^depth values, placed anywhere: small ones behave as their
    values say; big ones fail fast (< 3 s) naming aliases."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    doc = copy.deepcopy(BASE)
    body = yaml.safe_dump({k: v for k, v in doc.items() if k != where}, sort_keys=False)
    bomb = "\n".join(lines)
    text = "x_anchors:\n" + "\n".join("  " + ln for ln in bomb.splitlines()) + "\n" + body
    if where == "top":
        text = bomb + "\n" + yaml.safe_dump(doc, sort_keys=False)
    else:
        text += f"{where}: *a{depth}\n"
    folder = tmp_path_factory.mktemp("al")
    path = folder / "scenario.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    res, out = _check(runner, path)
    assert time.perf_counter() - t0 < 3, "alias documents must fail fast"
    assert res.exit_code == 2, out   # x_anchors / a0 are unknown keys, or the alias is the wrong shape
    values = sum(width ** i for i in range(depth + 2))
    if values > 100_000:
        assert "aliases" in out, out
        COUNTS["aliases: expansion refused"] += 1
    else:
        COUNTS["aliases: small, schema error"] += 1
    assert len(out) < 800


@settings(max_examples=120, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(path_values=st.sampled_from([("speculation.k", st.integers(0, 6)), ("seed", st.integers(0, 9)),
                                    ("drafter.tau", st.sampled_from([1.2, 1.5, 2.0, 2.5])),
                                    ("speculation.policy", st.sampled_from(sorted(VALID_POLICIES))),
                                    ("pipeline.policy_lag", st.integers(0, 3))]).flatmap(
    lambda pv: st.tuples(st.just(pv[0]), st.lists(pv[1], min_size=1, max_size=6, unique=True), st.data())))
def test_fuzz_duplicate_sweep_values(runner, tmp_path_factory, path_values):
    path, values, data = path_values
    dup = data.draw(st.sampled_from(values))
    values = values + [dup]
    data.draw(st.randoms(use_true_random=False)).shuffle(values)
    folder = tmp_path_factory.mktemp("dup")
    scen = _write(folder, BASE)
    res, out = _check(runner, scen, f"sweep={{{path}: {json.dumps(values)}}}")
    assert res.exit_code == 2 and f"sweep.{path}" in out and "twice" in out, out
    COUNTS["duplicate sweep values: refused naming sweep"] += 1


@settings(max_examples=120, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(word=st.sampled_from(POLICY_WORDS), swept=st.booleans(), other=st.sampled_from(POLICY_WORDS))
def test_fuzz_policy_names(runner, tmp_path_factory, word, swept, other):
    """Bare YAML words as policy names: the four names (off included) are accepted as names,
    everything else is refused naming speculation.policy; no value turns into a boolean label."""
    folder = tmp_path_factory.mktemp("pol")
    doc = {k: v for k, v in BASE.items() if k != "speculation"}
    if swept:
        extra = f"speculation: {{policy: always, k: 2}}\nsweep: {{speculation.policy: [{word}, {other}]}}\n"
    else:
        extra = f"speculation: {{policy: {word}, k: 2}}\n"
    scen = _write(folder, doc, extra)
    res, out = _check(runner, scen)
    words = [word, other] if swept else [word]
    from specsim.errors import load_yaml_text

    parsed = [load_yaml_text(f"v: {w}")["v"] for w in words]   # YAML 1.2: only true/false are booleans
    names_ok = all(isinstance(v, str) and v in VALID_POLICIES for v in parsed)
    dup = swept and parsed[0] == parsed[1]
    if names_ok and not dup:
        assert res.exit_code == 0, out
        if swept:
            from specsim.scenario import load_scenario

            assert load_scenario(scen).sweep["speculation.policy"] == parsed
        COUNTS["policy names: accepted as names"] += 1
    else:
        assert res.exit_code == 2 and "speculation.policy" in out, out
        if dup:
            assert "twice" in out, out
        COUNTS["policy names: refused naming speculation.policy"] += 1


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One small finished results folder (2 points, plots off)."""
    folder = tmp_path_factory.mktemp("fin")
    doc = {**copy.deepcopy(BASE), "sweep": {"speculation.k": [0, 2]}}
    scen = _write(folder, doc)
    out = folder / "out"
    res = typer.testing.CliRunner().invoke(app, ["run", str(scen), "--out", str(out), "--jobs", "1", "--no-progress"])
    assert res.exit_code == 0, res.output
    return scen, out


GARBAGE = [b"", b"{}", b"[]", b"null", b"0", b'"x"', b"{\"key\": 1}", b"\xff\xfe", b"{", b"NaN",
           b'{"row": {}, "steps": [], "point": {}, "runs": {}}', b'{"key": "x", "steady": {}, "steps": [], "meta": {}}']


@settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_corrupted_result_files(runner, tmp_path_factory, finished, data):
    """Any stored file of a finished folder replaced by garbage: the rerun exits 0, warns, and
    ends with the same points.csv (a garbled resolved.yaml is a conflict: exit 2 naming --out)."""
    scen, ref = finished
    out = tmp_path_factory.mktemp("cor") / "out"
    shutil.copytree(ref, out)
    files = sorted(p for p in out.rglob("*") if p.is_file())
    chosen = data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=4, unique=True))
    for f in chosen:
        garbage = data.draw(st.sampled_from(GARBAGE) | st.binary(max_size=64))
        f.write_bytes(garbage)
    res = runner.invoke(app, ["run", str(scen), "--out", str(out), "--jobs", "1", "--no-progress"])
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    _no_traceback(text)
    if any(f.name == "resolved.yaml" for f in chosen):
        assert res.exit_code == 2 and "--out" in text, text
        COUNTS["corrupted result files: resolved.yaml, refused naming --out"] += 1
        return
    assert res.exit_code == 0, text
    assert (out / "points.csv").read_bytes() == (ref / "points.csv").read_bytes()
    COUNTS["corrupted result files: recomputed, same points.csv"] += 1


@settings(max_examples=15, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from([("hbm_tbps",), ("efficiency", "compute"), ("efficiency", "memory"),
                              ("efficiency", "step_overhead_ms")]), factor=st.sampled_from([0.5, 0.9, 1.1, 2.0]))
def test_fuzz_changed_inputs(runner, tmp_path_factory, field, factor):
    """An edited hardware profile between two runs into one folder: nothing is reused."""
    from specsim.study.runner import run_scenario

    folder = tmp_path_factory.mktemp("chg")
    prof = folder / "prof.yaml"
    text = (Path(__file__).resolve().parents[2] / "specsim" / "catalog" / "hardware_profiles" / "h100_sxm.yaml").read_text()
    prof.write_text(text)
    doc = {**copy.deepcopy(BASE), "hardware": str(prof)}
    scen = _write(folder, doc)
    first = run_scenario(scen, [], out=folder / "out", jobs=1, progress=False)
    profile = yaml.safe_load(text)
    entry = profile
    for part in field:
        entry = entry[part]
    old = float(entry["value"])
    new = old * factor if old > 0 else factor
    entry["value"] = min(new, 1.0) if field[-1] in ("compute", "memory") and new != old else new
    if entry["value"] == old:
        entry["value"] = old * 0.5
    prof.write_text(yaml.safe_dump(profile, sort_keys=False))
    res = runner.invoke(app, ["run", str(scen), "--out", str(folder / "out"), "--jobs", "1", "--no-progress",
                              "--format", "json"])
    _no_traceback(res.output)
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["reused_runs"] == 0 and info["computed_runs"] == first.computed_runs
    assert any("inputs changed" in w for w in info["warnings"])
    COUNTS["changed inputs: recomputed, none reused"] += 1


# ============================================================================ #35: profiles, length files, --set
# Every case ends in exit 0 or a clean exit-2 error; OUTCOMES counts them per input class
# (printed at the end of the module with -s: `exit 0`, `exit 2 clean`, `other`).
OUTCOMES: Counter = Counter()
PROFILE = Path(__file__).resolve().parents[2] / "specsim" / "catalog" / "hardware_profiles" / "h100_sxm.yaml"
HOSTILE_NUMBERS = [float("inf"), float("-inf"), float("nan"), 5e-324, 1e-308, -1.0, 0, 1e300, 10**40, True, "abc",
                   None, [1], {"value": 1}]


def _outcome(klass: str, res) -> None:
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    clean = res.exit_code == 2 and (res.stderr or "").startswith("error: ") and "Traceback" not in out \
        and "internal error" not in out
    key = "exit 0" if res.exit_code == 0 else "exit 2 clean" if clean else "other"
    OUTCOMES[(klass, key)] += 1
    assert key != "other", out


@pytest.fixture(scope="module", autouse=True)
def _outcome_table():
    yield
    if OUTCOMES:
        classes = sorted({k for k, _ in OUTCOMES})
        print("\nfuzz outcomes (#35)      exit 0   exit 2 clean   other")
        for k in classes:
            print(f"  {k:<22} {OUTCOMES[(k, 'exit 0')]:>6}   {OUTCOMES[(k, 'exit 2 clean')]:>12}   "
                  f"{OUTCOMES[(k, 'other')]:>5}")


def _profile_paths(doc: dict) -> list[tuple[str, ...]]:
    out = []

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict) and set(v) <= {"value", "source"} and "value" in v:
                out.append(prefix + (k, "value"))
            elif isinstance(v, dict) and k not in ("kernel_fit",):
                walk(v, prefix + (k,))
            elif not isinstance(v, dict):
                out.append(prefix + (k,))
    walk(doc, ())
    return out


_PROFILE_DOC = yaml.safe_load(PROFILE.read_text(encoding="utf-8"))
_PROFILE_LEAVES = _profile_paths(_PROFILE_DOC)


@settings(max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(leaf=st.sampled_from(_PROFILE_LEAVES), value=st.sampled_from(HOSTILE_NUMBERS),
       extra=st.sampled_from([None, "hbm_tbs", "efficency", "notes"]), raw=st.sampled_from([None, "bom", "dup",
                                                                                          "binary"]))
def test_fuzz_hardware_profiles(runner, tmp_path_factory, leaf, value, extra, raw):
    folder = tmp_path_factory.mktemp("hw")
    doc = copy.deepcopy(_PROFILE_DOC)
    _set(doc, leaf, value)
    if extra:
        doc[extra] = 1
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    data = text.encode()
    if raw == "bom":
        data = b"\xef\xbb\xbf" + data
    elif raw == "dup":
        data += b"hbm_gb: 3\n"
    elif raw == "binary":
        data = data[:200] + b"\x00\xff" + data[200:]
    prof = folder / "hw.yaml"
    prof.write_bytes(data)
    path = _write(folder, {**BASE, "hardware": str(prof)})
    _outcome("hardware profile", runner.invoke(app, ["check", str(path)]))


LENGTH_LINES = ["100", "200", "1e3", "12.5", '"300', '400"', "-5", "0", "nan", "inf", "abc", "", "  ", "7,8", "length",
                "\ufeff100", "\x00", "99999999999999999999", "1" * 400]


@settings(max_examples=150, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.sampled_from(LENGTH_LINES), min_size=0, max_size=12),
       suffix=st.sampled_from([".csv", ".jsonl", ".txt"]), special=st.sampled_from([None, None, None, "fifo", "dir"]))
def test_fuzz_length_files(runner, tmp_path_factory, lines, suffix, special):
    import os

    folder = tmp_path_factory.mktemp("len")
    f = folder / f"lengths{suffix}"
    if special == "fifo":
        os.mkfifo(f)
    elif special == "dir":
        f.mkdir()
    else:
        f.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    doc = copy.deepcopy(BASE)
    doc["workload"]["response_tokens"] = {"kind": "empirical", "path": f.name}
    path = _write(folder, doc)
    _outcome("length file", runner.invoke(app, ["check", str(path)]))


SET_PATHS = ["training.mfu", "drafter.heterogeneity", "output.capacity.rollout_gpus", "workload.max_prompt_tokens",
             "speculation.tree_branching", "workload.prompts", "pipeline.policy_lag", "drafter.general_tau",
             "sweep.speculation.k", "workload.response_tokens", "output.max_simulated_tokens", "rollout.tp",
             "hardware", "seed", "speculation.k"]
SET_VALUES = ["5e-324", "1e-308", "[0]", "[3, 3.0, '3']", "10000000", "[1000, 1000, 1000, 1000, 1000, 1000]",
              ".inf", ".nan", "-1", "0", "{kind: lognormal, median: 40, p99: 120, mu: 1, sigma: 1}",
              "{a: 1, a: 2}", "1e12", "abc", "", "[]", "3", "/dev/zero", "[2, 2]", "true"]


@settings(max_examples=200, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(sets=st.lists(st.tuples(st.sampled_from(SET_PATHS), st.sampled_from(SET_VALUES)), min_size=1, max_size=3))
def test_fuzz_set_overrides(runner, tmp_path_factory, sets):
    folder = tmp_path_factory.mktemp("set")
    path = _write(folder, BASE)
    args = ["check", str(path)]
    for p, v in sets:
        args += ["--set", f"{p}={v}"]
    _outcome("--set", runner.invoke(app, args))
