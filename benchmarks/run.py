"""End-to-end wall time of `specsim run` on the default 235B async sweep (and optional others).

    python benchmarks/run.py [--jobs 2] [--scenario scenarios/235b_async.yaml ...] [--set path=value ...]

Each case runs `python -m specsim run SCENARIO --out <fresh temp dir> --jobs N --format json` as a
subprocess (a fresh folder: nothing is resumed) and measures its wall time from outside, so
interpreter start-up, worker spawn, the sweep, the capacity plan, the plots and the summary are all
included. Prints one row per case: scenario, rows (points × replicates), simulated pipeline runs,
wall seconds, seconds per row, the best point and its E2E speedup vs sync AR.

The budget for the default case is 25 s on 2 CPU cores with --jobs 2 (issue #31), first call included.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [str(ROOT / "scenarios" / "235b_async.yaml")]
BUDGET_S = 25.0


def run_case(scenario: str, jobs: int, sets: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:
        cmd = [sys.executable, "-m", "specsim", "run", scenario, "--out", str(Path(tmp) / "res"),
               "--jobs", str(jobs), "--format", "json"]
        for s in sets:
            cmd += ["--set", s]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    info = json.loads(proc.stdout)
    return {"scenario": Path(scenario).stem, "rows": info["rows"], "combinations": info["combinations"],
            "replicates": info["replicates"], "runs": info["computed_runs"], "wall_s": wall,
            "inner_s": info["wall_s"], "best": info["best"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", help="scenario YAML (repeatable; default 235b_async)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--set", "-s", dest="sets", action="append", default=[], help="override, as for specsim run")
    args = ap.parse_args()
    table = Table(title=f"specsim run, end to end (subprocess wall time, --jobs {args.jobs}; budget {BUDGET_S:.0f} s "
                        "for 235b_async)")
    for col in ("scenario", "points × replicates", "rows", "runs simulated", "wall s", "in-process s", "s / row",
                "best point", "E2E vs sync AR"):
        table.add_column(col, justify="left" if col in ("scenario", "best point") else "right")
    for scen in args.scenario or DEFAULT:
        r = run_case(scen, args.jobs, args.sets)
        b = r["best"]
        e2e = b["e2e_speedup_vs_sync_ar"]
        ci = f" [{e2e['ci95'][0]:.3f}, {e2e['ci95'][1]:.3f}]" if e2e.get("ci95") else ""
        vals = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in b["values"].items()) or "-"
        table.add_row(r["scenario"], f"{r['combinations']} × {r['replicates']}", str(r["rows"]), str(r["runs"]),
                      f"{r['wall_s']:.1f}", f"{r['inner_s']:.1f}", f"{r['wall_s'] / r['rows']:.2f}", vals,
                      f"{e2e['mean']:.3f}×{ci}" if e2e.get("mean") is not None else "n/a")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
