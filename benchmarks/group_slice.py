"""The limit on prompt groups in flight (`pipeline.max_groups_in_flight`, sim/stream.py): how its
slice length moves the NeMo-RL rows that set it, and what the limit costs in CPU.

    python benchmarks/group_slice.py

While groups wait for a place the engines run in slices of `GROUP_SLICE_SHARE` of a group's mean
time; a waiting group can start up to one slice late. For each NeMo-RL async row whose limit binds,
one table row per slice share (0.25, 0.5 — the default —, 1 %): the steady step and exposed
generation (s) and the CPU seconds of one run, and a last row with the limit off (null). Every run
is in this process, one after another (machine noise affects all alike); the step records use
`run_pipeline(engine_results=False)`, as `specsim run` does.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from specsim.scenario import load_scenario
from specsim.sim import stream
from specsim.sim.pipeline import run_pipeline
from specsim.world.resolve import resolve

ROOT = Path(__file__).resolve().parents[1]
ROWS = ("v06_h100_235b_1off_256", "v06_h100_30b_8off_192", "v06_gb200_235b_1off_128")
SHARES = (0.0025, 0.005, 0.01)


def steady(path: Path, overrides: list[str]) -> tuple[float, float, float]:
    """(steady step s, steady exposed generation s, CPU s) of one run of the scenario."""
    sc = load_scenario(path, overrides)
    world = resolve(sc)
    t0 = time.process_time()
    frame = run_pipeline(world, engine_results=False).steps_frame()
    cpu = time.process_time() - t0
    d = frame[frame.step >= sc.pipeline.warmup_steps]
    return float(d.step_s.mean()), float(d.exposed_generation_s.mean()), cpu


def main() -> None:
    table = Table(title="groups in flight: slice share against the limited rows")
    for col in ("row", "slice share", "step s", "exposed generation s", "CPU s"):
        table.add_column(col, justify="left" if col == "row" else "right")
    default = stream.GROUP_SLICE_SHARE
    try:
        for row in ROWS:
            path = ROOT / "calibration" / "targets" / "nemo_rl_performance" / f"{row}.yaml"
            for share in SHARES:
                stream.GROUP_SLICE_SHARE = share
                step, exposed, cpu = steady(path, [])
                table.add_row(row, f"{100 * share:g} %" + (" (default)" if share == default else ""),
                              f"{step:.2f}", f"{exposed:.2f}", f"{cpu:.1f}")
            stream.GROUP_SLICE_SHARE = default
            step, exposed, cpu = steady(path, ["pipeline.max_groups_in_flight=null"])
            table.add_row(row, "no limit", f"{step:.2f}", f"{exposed:.2f}", f"{cpu:.1f}")
    finally:
        stream.GROUP_SLICE_SHARE = default
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
