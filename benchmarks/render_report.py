"""Render a results folder's report.html to a PNG in headless Chromium, to look at it as a reviewer will.

    python benchmarks/render_report.py RESULTS_DIR [--out report.png] [--width 1366] [--height 6000]

Needs Debian's `chromium` (apt-get install chromium). Prints one table row: the page, its size, the
screenshot and the wall time. Without a results folder, run the main job first:
`specsim run scenarios/235b_async.yaml`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir")
    ap.add_argument("--out", default=None, help="PNG to write (default: RESULTS_DIR/report.png)")
    ap.add_argument("--width", type=int, default=1366, help="viewport width in CSS pixels (a laptop)")
    ap.add_argument("--height", type=int, default=6000, help="screenshot height in pixels")
    args = ap.parse_args(argv)
    page = Path(args.results_dir).resolve() / "report.html"
    if not page.is_file():
        print(f"error: {page} does not exist (run `specsim run` into that folder first)", file=sys.stderr)
        return 2
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("error: headless Chromium not found (apt-get install chromium)", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else page.with_name("report.png")
    t0 = time.perf_counter()
    res = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={args.width},{args.height}", f"--screenshot={out}", page.as_uri()],
                         capture_output=True, text=True, timeout=300, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0 or not out.is_file():
        print(f"error: chromium exited {res.returncode}: {res.stderr[-2000:]}", file=sys.stderr)
        return 1
    t = Table(title="report.html in headless Chromium")
    for c in ("page", "page KiB", "screenshot", "viewport", "wall s"):
        t.add_column(c)
    t.add_row(str(page), f"{page.stat().st_size / 1024:.0f}", str(out), f"{args.width}×{args.height}", f"{wall:.1f}")
    Console().print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
