"""End-to-end wall time of `specsim run` on the default 235B async sweep (and optional others), and
of `specsim project` on a whole run.

    python benchmarks/run.py [--jobs 2] [--scenario scenarios/235b_async.yaml ...] [--set path=value ...]
                             [--against DIR|REV] [--repeat N]
    python benchmarks/run.py --project [scenarios/235b_run.yaml] [--steps 300] [--jobs 2]

Each case runs `python -m specsim run SCENARIO --out <fresh temp dir> --jobs N --format json` as a
subprocess (a fresh folder: nothing is resumed) and measures its wall time from outside, so
interpreter start-up, worker spawn, the sweep, the capacity plan, the plots and the summary are all
included, and its CPU time (user + system of the process and its workers). Prints one row per case:
scenario, rows (points × replicates), simulated pipeline runs, wall and CPU seconds, peak MiB of the
largest process, seconds per row, the best point and its E2E speedup vs sync AR. `--against DIR`
runs the same command in another checkout (DIR's `specsim` package, its copy of the scenario) in the
same invocation, alternating the two `--repeat` times, shows the fastest of each by CPU and prints
the ratios (this tree ÷ DIR) and whether steps.csv, points.csv, runs.csv and summary.md are
byte-identical: on a shared machine the CPU ratio is what to quote. DIR may also be a git revision of
this repository, exported as for `--plan` below.

The budget for the default case is 25 s on 2 CPU cores with --jobs 2 (issue #31), first call included.

`--project` times `python -m specsim project SCENARIO --set pipeline.steps=STEPS --jobs N --out <fresh
temp dir> --format json` the same way (default scenarios/235b_run.yaml at 300 steps, 2 replicates, SD and AR: 4
pipeline runs; budget 60 s) and prints its wall seconds, the peak resident memory of its largest
process (the operating system's account of the waited-for children) and the projected run speedup.

`--plan` times `python -m specsim plan SCENARIO --jobs N --out <fresh temp dir> --format json` the same
way (default scenarios/8b_rl_think_async.yaml at 16 prompts on 16 GPUs, 8 steps, k 0 or 3, TP1 or TP2: 56
candidates, a plan every version plans)
and prints its wall and CPU seconds (the children's user + system time, workers included), the runs
it simulated, the candidates and the best AR and SD steps. `--against DIR` runs the same command in
another checkout (DIR's `specsim` package, e.g. the main branch) in the same invocation, alternating
the two `--repeat` times, and prints the ratios (this tree ÷ DIR): both sides share the machine's
load, so the ratio is what to quote. `--against REV` (a git revision of this repository, e.g.
a97fb80, the planner before issue #48) exports that revision with `git archive` into a temporary
folder and runs it there:

    python benchmarks/run.py --plan scenarios/235b_plan.yaml --against a97fb80    # issue #48's target
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
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
PROJECT_DEFAULT = str(ROOT / "scenarios" / "235b_run.yaml")
PROJECT_BUDGET_S = 60.0


def timed_json(args: list[str], sets: list[str]) -> tuple[dict, float]:
    """Run `python -m specsim ARGS --set ...` as a subprocess: (its JSON output, wall seconds)."""
    cmd = [sys.executable, "-m", "specsim", *args]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout), wall


#: runs the command given as its arguments and prints on stderr the peak resident KiB of its largest
#: process (this run's own: the getrusage of a process that waited for it and nothing else)
PEAK_OF = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
           "print(f'PEAK_KIB={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr); sys.exit(rc)")
#: the files of a results folder the A/B compares byte for byte (every number the run reports)
COMPARED = ("steps.csv", "points.csv", "runs.csv", "summary.md")


def run_case(scenario: str, jobs: int, sets: list[str], root: Path = ROOT) -> dict:
    """One `specsim run` into a fresh folder, in checkout `root` (its package imported: cwd first
    on sys.path; a scenario of this tree is read from `root`'s copy): wall and CPU seconds (the
    children's user + system time, workers included), peak MiB of its largest process, and the
    sha256 of the COMPARED files."""
    path = Path(scenario).resolve()
    if path.is_relative_to(ROOT) and (Path(root) / path.relative_to(ROOT)).is_file():
        path = Path(root) / path.relative_to(ROOT)
    cmd = [sys.executable, "-m", "specsim", "run", str(path), "--jobs", str(jobs), "--format", "json", "--no-progress"]
    for x in sets:
        cmd += ["--set", x]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:   # a fresh folder: nothing is resumed
        out = Path(tmp) / "res"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", PEAK_OF, *cmd, "--out", str(out)], check=False,
                              capture_output=True, text=True, cwd=root)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} in {root} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        # the checkout's path (the scenario file's, in summary.md's commands) is not a result
        digests = {f: hashlib.sha256((out / f).read_bytes().replace(str(root).encode(), b"<checkout>")).hexdigest()
                   for f in COMPARED if (out / f).is_file()}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    info = json.loads(proc.stdout)
    peak_kib = int(proc.stderr.strip().rsplit("PEAK_KIB=", 1)[-1])
    return {"scenario": Path(scenario).stem, "rows": info["rows"], "combinations": info["combinations"],
            "replicates": info["replicates"], "runs": info["computed_runs"], "wall_s": wall,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "peak_mib": peak_kib / 1024, "inner_s": info["wall_s"], "best": info["best"], "digests": digests}


def print_run(args) -> None:
    """The main job (or --scenario ...) in this tree, and with --against in DIR (or REV) too, alternating
    `--repeat` times: the fastest of each (by CPU), the ratios and whether the outputs are the same."""
    with tempfile.TemporaryDirectory(prefix="specsim-against-") as tmp:
        _print_run(args, [ROOT] + ([against_root(args.against, Path(tmp))] if args.against else []))


def _print_run(args, roots: list[Path]) -> None:
    title = (f"specsim run, end to end (subprocess, --jobs {args.jobs}, best of {args.repeat} by CPU; budget "
             f"{BUDGET_S:.0f} s wall for 235b_async on 2 idle cores)")
    table = Table(title=title)
    for col in ("scenario", "checkout", "points × replicates", "runs simulated", "wall s", "CPU s", "peak MiB",
                "s / row", "best point", "E2E vs sync AR"):
        table.add_column(col, justify="left" if col in ("scenario", "checkout", "best point") else "right")
    notes = []
    for scen in args.scenario or DEFAULT:
        results: dict[str, list[dict]] = {str(r): [] for r in roots}
        for _ in range(args.repeat):
            for r in roots:
                results[str(r)].append(run_case(scen, args.jobs, args.sets, r))
        best = {k: min(v, key=lambda r: r["cpu_s"]) for k, v in results.items()}
        for k, r in best.items():
            b = r["best"]
            e2e = b["e2e_speedup_vs_sync_ar"]
            ci = f" [{e2e['ci95'][0]:.3f}, {e2e['ci95'][1]:.3f}]" if e2e.get("ci95") else ""
            vals = ", ".join(f"{n.split('.')[-1]}={v}" for n, v in b["values"].items()) or "-"
            table.add_row(r["scenario"], "this tree" if k == str(ROOT) else k, f"{r['combinations']} × {r['replicates']}",
                          str(r["runs"]), f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", f"{r['peak_mib']:.0f}",
                          f"{r['wall_s'] / r['rows']:.2f}", vals,
                          f"{e2e['mean']:.3f}×{ci}" if e2e.get("mean") is not None else "n/a")
        if args.against:
            a, o = best[str(roots[0])], best[str(roots[1])]
            same = [f for f in COMPARED if f in a["digests"] and a["digests"][f] == o["digests"].get(f)]
            differ = [f for f in COMPARED if f not in same]
            notes.append(f"{Path(scen).stem}: this tree / {roots[1]}: CPU {a['cpu_s'] / o['cpu_s']:.3f}, wall "
                         f"{a['wall_s'] / o['wall_s']:.3f}; byte-identical: {', '.join(same) or 'none'}"
                         + (f"; DIFFERENT: {', '.join(differ)}" if differ else ""))
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    for line in notes:
        print(line)
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


def project_case(scenario: str, steps: int, jobs: int, sets: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:   # a fresh folder: nothing is resumed
        p, wall = timed_json(["project", scenario, "--set", f"pipeline.steps={steps}", "--jobs", str(jobs),
                              "--out", str(Path(tmp) / "res"), "--format", "json", "--no-progress"], sets)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024      # kB on Linux
    return {"scenario": Path(scenario).stem, "steps": p["steps"], "runs": 2 * p["replicates"], "wall_s": wall,
            "peak_mib": peak_mib, "speedup": p["run_speedup"]}


def print_project(args) -> None:
    r = project_case(args.project, args.steps, args.jobs, args.sets)
    table = Table(title=f"specsim project, end to end (subprocess wall time, --jobs {args.jobs}; budget "
                        f"{PROJECT_BUDGET_S:.0f} s for 235b_run at 300 steps)")
    for col in ("scenario", "RL steps", "pipeline runs", "wall s", "peak MiB (largest process)", "run speedup SD/AR"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    m, lo, hi = r["speedup"]
    table.add_row(r["scenario"], str(r["steps"]), str(r["runs"]), f"{r['wall_s']:.1f}", f"{r['peak_mib']:.0f}",
                  f"{m:.3f}× [{lo:.3f}, {hi:.3f}]")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


PLAN_DEFAULT = str(ROOT / "scenarios" / "8b_rl_think_async.yaml")
PLAN_SETS = ["workload.prompts=16", "plan.total_gpus=16", "plan.search.steps=8", "plan.k=[0,3]",
             "plan.layouts=[{tp: 1}, {tp: 2}]"]


def plan_case(scenario: str, jobs: int, sets: list[str], root: Path) -> dict:
    """One `specsim plan` in checkout `root` (its package imported: cwd first on sys.path; a scenario
    of this tree is read from `root`'s copy, which that version understands)."""
    path = Path(scenario).resolve()
    if path.is_relative_to(ROOT) and (Path(root) / path.relative_to(ROOT)).is_file():
        path = Path(root) / path.relative_to(ROOT)
    cmd = [sys.executable, "-m", "specsim", "plan", str(path), "--jobs", str(jobs),
           "--format", "json", "--no-progress"]
    for x in sets:
        cmd += ["--set", x]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="specsim-bench-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.run([*cmd, "--out", str(Path(tmp) / "res")], check=False, capture_output=True, text=True,
                              cwd=root)
        wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} in {root} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    info = json.loads(proc.stdout)
    s, a = info["search"], info["answer"]
    step = (lambda b: b["step_s"]["mean"] if b else None)
    return {"root": str(root), "wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "runs": s["computed_runs"], "simulated": s["simulated_candidates"], "candidates": s["candidates"],
            "best_ar": step(a.get("best_ar")), "best_sd": step(a.get("best_sd")),
            "best_ar_id": (a.get("best_ar") or {}).get("candidate"), "best_sd_id": (a.get("best_sd") or {}).get("candidate"),
            "pruned_by": s.get("pruned_by", {}), "dropped": s.get("dropped_at_halving", {}),
            "rounds": [(r["round"], r.get("runs")) for r in s.get("rounds", [])]}


def print_plan(args) -> None:
    with tempfile.TemporaryDirectory(prefix="specsim-against-") as tmp:
        roots = [ROOT] + ([against_root(args.against, Path(tmp))] if args.against else [])
        _print_plan(args, roots)


def against_root(against: str, tmp: Path) -> Path:
    """The checkout `--against` names: a folder as it is, or a git revision of this repository
    exported (`git archive`, read-only on the repository) into `tmp`."""
    if Path(against).is_dir():
        return Path(against).resolve()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", against], check=False,
                             capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--against {against}: neither a folder nor a git revision of {ROOT} "
                         f"({archive.stderr.decode(errors='replace').strip()})")
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    return tmp


def _print_plan(args, roots: list[Path]) -> None:
    # the small 8B plan's overrides belong to the default scenario only: another scenario plans as written
    default = Path(args.plan).resolve() == Path(PLAN_DEFAULT).resolve()
    sets = args.sets or (PLAN_SETS if default else [])
    results: dict[str, list[dict]] = {str(r): [] for r in roots}
    for _ in range(args.repeat):
        for r in roots:
            results[str(r)].append(plan_case(args.plan, args.jobs, sets, r))
    table = Table(title=f"specsim plan, end to end ({Path(args.plan).name} {' '.join(sets)}; --jobs {args.jobs}; "
                        f"best of {args.repeat})")
    for col in ("checkout", "candidates", "simulated", "runs", "wall s", "CPU s", "best AR s", "best SD s"):
        table.add_column(col, justify="left" if col == "checkout" else "right")
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in results.items()}
    fmt = (lambda v: "-" if v is None else f"{v:.1f}")
    for k, r in best.items():
        table.add_row(k, str(r["candidates"]), str(r["simulated"]), str(r["runs"]), f"{r['wall_s']:.1f}",
                      f"{r['cpu_s']:.1f}", fmt(r["best_ar"]), fmt(r["best_sd"]))
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    for k, r in best.items():      # where the search's CPU went: what the bounds pruned, what halving dropped
        print(f"{k}: pruned by {r['pruned_by'] or 'nothing'}; not run to full replicates {r['dropped'] or 'none'}; "
              f"runs per round {r['rounds']}")
    if args.against:
        a, b = best[str(roots[0])], best[str(roots[1])]
        same = (a["best_ar_id"], a["best_sd_id"]) == (b["best_ar_id"], b["best_sd_id"])
        print(f"ratio this tree / {roots[1]}: wall {a['wall_s'] / b['wall_s']:.2f}, CPU {a['cpu_s'] / b['cpu_s']:.2f}, "
              f"runs {a['runs'] / max(b['runs'], 1):.2f}; same optima: {'yes' if same else 'NO'}")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", help="scenario YAML (repeatable; default 235b_async)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--set", "-s", dest="sets", action="append", default=[], help="override, as for specsim run")
    ap.add_argument("--project", nargs="?", const=PROJECT_DEFAULT, default=None, metavar="SCENARIO",
                    help="time `specsim project` instead (default scenarios/235b_run.yaml)")
    ap.add_argument("--steps", type=int, default=300, help="RL steps of the projected run (with --project)")
    ap.add_argument("--plan", nargs="?", const=PLAN_DEFAULT, default=None, metavar="SCENARIO",
                    help="time `specsim plan` instead (default 8b_rl_think_async at 16 prompts on 16 GPUs)")
    ap.add_argument("--against", default=None, metavar="DIR|REV",
                    help="also run it (the main job, or --plan) in this checkout or git revision, alternating, "
                         "and print the ratios")
    ap.add_argument("--repeat", type=int, default=1, help="runs per checkout, alternating (the fastest is shown)")
    args = ap.parse_args()
    if args.plan:
        print_plan(args)
        return
    if args.project:
        print_project(args)
        return
    print_run(args)

if __name__ == "__main__":
    main()
