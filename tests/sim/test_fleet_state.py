"""The fleet's state as explicit parts (sim/fleet/state.py): a phase reaches the state only through
its named parts, and the window (sim/fleet/window.py) carries every per-response column over."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from engine_helpers import make_config, make_work

from specsim.policy import Always
from specsim.sim.fastlaw import step_law
from specsim.sim.fleet.admit import admit
from specsim.sim.fleet.loop import Fleet
from specsim.sim.fleet.state import RESPONSE_FIELDS, FleetState, FleetWork, Responses

FLEET = Path(__file__).resolve().parents[2] / "specsim" / "sim" / "fleet"
PARTS = {"resp", "engines", "slots", "queues", "groups", "counters", "prices", "schedule"}


def _small_fleet() -> Fleet:
    cfg = make_config(Always(k=3), max_batch=16, kv_capacity_tokens=10**7)
    works = [make_work(e, groups=2, group_size=4, median=300, cap=800) for e in range(2)]
    alphas = np.concatenate([w.alphas for w in works])
    law = step_law(alphas, 3, cfg.position_decay)
    work = FleetWork(np.repeat(np.arange(2), [len(w) for w in works]), np.concatenate([w.response_ids for w in works]),
                     np.concatenate([w.group_ids + 100 * e for e, w in enumerate(works)]),
                     np.concatenate([w.prompt_tokens for w in works]), np.concatenate([w.response_tokens for w in works]),
                     np.zeros(len(alphas)), alphas, {3: law})
    return Fleet(cfg, ["e0", "e1"], work)


def test_fleet_state_is_its_parts():
    """A fleet's state is the eight parts (plus its config and whether it is open); each part has
    __slots__, so no phase can hang a stray attribute on it."""
    fl = _small_fleet()
    state = {k for k in vars(fl) if k not in ("batch_dependent", "drainable", "open_drainable", "relayable",
                                              "relay_paused", "kv_chainable", "kv_chain_boundaries")}
    assert state == PARTS | {"cfg", "open"}
    for name in PARTS:
        part = getattr(fl, name)
        assert not hasattr(part, "__dict__"), f"{name} ({type(part).__name__}) has no __slots__"


def test_phases_reach_the_state_only_through_its_parts():
    """Every function of sim/fleet/ that takes the state (`st`, `fl`) reads from it only its parts,
    its config and its cross-part methods (key, unkey, set_k, rekey, prefill): which parts a phase
    touches is visible from its first lines."""
    methods = {n for n, v in vars(FleetState).items() if callable(v) and not n.startswith("__")}
    allowed = PARTS | methods | {"cfg"}
    stray = []
    for path in sorted(FLEET.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef):
                continue
            roots = {a.arg for a in node.args.args} & {"st", "fl"}
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in roots \
                        and sub.attr not in allowed:
                    stray.append(f"{path.name}:{node.name}: {sub.value.id}.{sub.attr}")
    assert not stray, stray


def test_the_window_carries_every_per_response_column():
    """Every per-response array of Responses is rebuilt by a rewindow (RESPONSE_FIELDS), but the
    laws (rebuilt on their own) and the per-engine offsets: a column added to Responses alone would
    be left at the old responses' indices."""
    fl = _small_fleet()
    N = fl.resp.N
    columns = {name for name in Responses.__slots__
               if isinstance(getattr(fl.resp, name), np.ndarray) and getattr(fl.resp, name).shape == (N,)}
    assert columns == set(RESPONSE_FIELDS)


def _arrays(fl: Fleet) -> dict[str, np.ndarray]:
    """Every array of the parts a preemption writes (resp, engines, slots, groups, counters)."""
    out = {}
    for name in ("resp", "engines", "slots", "groups", "counters"):
        part = getattr(fl, name)
        for attr in part.__slots__:
            v = getattr(part, attr, None)
            if isinstance(v, np.ndarray):
                out[f"{name}.{attr}"] = v.copy()
    return out


def test_one_per_engine_paths_equal_the_general_ones():
    """fit_batch's distinct-engine paths (unkey and Groups.release with one_per_engine,
    Slots.push_slot_each) write the same numbers, bit for bit, as the general per-engine sums, for
    one active response of each engine taken mid-run (SD on, so the SD counters move too)."""
    import copy

    fl = _small_fleet()
    cand, eng = admit(fl, np.arange(fl.engines.E))
    fl.engines.k[:] = 3                     # as fit_batch's set_k leaves a policy's k = 3
    fl.key(cand, eng)
    fl.engines.s += 37                      # 37 steps on: every response has progress to freeze
    assert (fl.engines.n > 1).all() and (fl.engines.B > 0).all()
    runs = []
    for one in (False, True):
        f = copy.deepcopy(fl)
        e = np.arange(f.engines.E)
        for _ in range(5):                  # the newest group (4 members) empties: its prompt blocks go
            col = np.argmax(f.slots.slot_seq[e, :f.slots.slots_seen], axis=1)
            j = f.slots.slot_resp[e, col]
            f.unkey(j, e, one_per_engine=one)
            f.groups.release(f.resp.groups[j], f.engines.GB, one_per_engine=one)
            if one:
                f.slots.push_slot_each(e, col)
            else:
                f.slots.push_slots(e, col)
        runs.append(_arrays(f))
    general, each = runs
    assert general.keys() == each.keys()
    for name in general:
        np.testing.assert_array_equal(each[name], general[name], err_msg=name)
    before = _arrays(fl)
    for name in ("engines.A", "engines.B", "engines.GB", "counters.sd_tokens", "slots.ftop"):
        assert not np.array_equal(general[name], before[name]), name      # each path was taken
