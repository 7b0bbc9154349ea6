"""The ladder in a `specsim run` summary, for a scenario that opts in (`output.explain: ladder`).

`study/runner.run_scenario` writes the summary's `explain` block with what the run measured at
its best point (study/report/summary.explain_block) and the `specsim explain` call that gives the
point's ladder; it cannot run that call itself (explain/ sits above study/). `run_and_explain`
runs the scenario, and when the block asks for the ladder, runs the call (explain/ladder.explain),
writes its files into `explain/` of the results folder, puts a compact ladder into the block and
writes summary.json, summary.md and report.html once: the ladder is computed under the run's own
lock (`run_scenario(..., then=...)`), before the run writes its summary. Its pipeline runs go
into the results folder's runs/ (study/store.RunStore), beside the sweep's: the point's own runs
are reused, and an interrupted ladder resumes from what it stored.

Why it is opt-in: the ladder runs every coalition of the point's n mechanisms (2ⁿ) and the
ladder's rungs, each as the point and its baseline per replicate: on the main job about 70
variants × 3 replicates, tens of times the point's own runs. The facts cost nothing extra.

Resume: the ladder is stored with a key (the resolved scenario, its inputs and the call) in
`explain/run_ladder.json`; a rerun into the folder with the same key reuses it, anything else
recomputes it. `--fresh` and `--force` discard it with the rest (study/results_folder.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path

from specsim import atomic
from specsim.errors import SpecError
from specsim.explain import ladder
from specsim.inputs import read_json, read_text
from specsim.study.report.tables import jsonable
from specsim.study.runner import RunSummary, run_scenario
from specsim.study.store import ResultsFolder

__all__ = ["LADDER_DIR", "LADDER_FILE", "compact_ladder", "run_and_explain"]

#: where the ladder's files go inside the results folder
LADDER_DIR = "explain"
#: the compact ladder and its key (what a resumed run reuses)
LADDER_FILE = "run_ladder.json"


def compact_ladder(e, wall_s: float) -> dict:
    """What the summary keeps of an Explanation: rungs and Shapley shares with their intervals,
    the costs at the point's batch, and what the ladder cost (pipeline runs, seconds)."""
    return {"replicates": e.replicates, "steps": e.steps, "mean_active_batch": e.batch,
            "rungs": [{"rung": r["rung"], "label": r["label"], "gain": r["gain"], "factor": r["factor"]}
                      for r in e.ladder],
            "shapley": [{"factor": s["factor"], "label": s["label"], "factor_ratio": s["factor_ratio"]}
                        for s in e.shapley],
            "realised": e.realised, "ceiling": e.ceiling,
            "at_batch": {k: e.at_batch[k] for k in ("mean_active_batch", "sd_over_decode_step", "per_token_sd_gain")},
            "pipeline_runs": e.runs, "wall_s": wall_s, "folder": LADDER_DIR}


def _key(out_dir: Path, summary: dict, call: dict) -> str:
    resolved = read_text(out_dir / "resolved.yaml", "--out", "results file")
    payload = {"resolved": resolved, "inputs": (summary.get("run") or {}).get("inputs"), "call": call,
               "version": summary.get("specsim_version")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _stored(path: Path, key: str) -> dict | None:
    """The stored compact ladder if it is this key's and well formed, else None (recompute)."""
    if not path.is_file():
        return None
    try:
        doc = read_json(path, "--out", "stored ladder")
    except SpecError:
        return None
    lad = doc.get("ladder") if isinstance(doc, dict) and doc.get("key") == key else None
    ok = isinstance(lad, dict) and isinstance(lad.get("rungs"), list) and isinstance(lad.get("shapley"), list)
    return lad if ok else None


def run_and_explain(path: str | Path, overrides: Sequence[str] = (), out: str | Path | None = None, jobs: int = 2,
                    **kwargs) -> RunSummary:
    """`run_scenario` (same arguments), and, when the scenario asks for it (`output.explain:
    ladder`), the best point's ladder into the summary (module docstring), computed under the
    run's own lock before its summary is written (once). A ladder that cannot run (a
    counterfactual scenario: explain sets the what-ifs itself) leaves the run as it is and says why
    in the block (`ladder_error`) and the run's warnings."""
    done: list[bool] = []

    def ladder(folder: ResultsFolder, summary: dict) -> None:
        block = summary.get("explain")
        if block and block.get("ladder_requested"):
            done.append(_ladder(folder, summary, block, jobs))

    res = run_scenario(path, overrides, out=out, jobs=jobs, then=ladder, **kwargs)
    if any(done):
        res.files += [f"{LADDER_DIR}/{n}" for n in ("explain.md", "explain.json", "ladder.csv", "shapley.csv",
                                                    "waterfall.png", "waterfall.csv", "report.html", LADDER_FILE)]
    return res


def _ladder(folder: ResultsFolder, summary: dict, block: dict, jobs: int) -> bool:
    """The ladder of the run's best point into `block` (reused from explain/run_ladder.json when its
    key matches; its pipeline runs kept in and reused from the run's own runs/). False: it could
    not run (`ladder_error`)."""
    out_dir = folder.path
    key = _key(out_dir, summary, block["call"])
    lad = _stored(out_dir / LADDER_DIR / LADDER_FILE, key)
    if lad is None:
        call = block["call"]
        t0 = time.perf_counter()
        try:
            e = ladder.explain(call["scenario"], call["sets"], point=call["point"] or None, replicates=call["replicates"],
                        jobs=jobs, store=folder.store)
        except SpecError as exc:
            block["ladder_error"] = str(exc)
            folder.warnings.append(f"output.explain: ladder was not computed: {exc}")
            return False
        ladder.write_explanation(out_dir / LADDER_DIR, e)
        lad = jsonable(compact_ladder(e, time.perf_counter() - t0))
        atomic.write_json(out_dir / LADDER_DIR / LADDER_FILE, {"key": key, "ladder": lad})
    block["ladder"] = lad
    return True
