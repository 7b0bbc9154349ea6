"""Execute notebooks/capacity_planning.ipynb top to bottom with nbclient (kernel python3 of this
venv). Skipped, with the reason, only when nbclient/nbformat cannot be imported."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "capacity_planning.ipynb"


def test_capacity_planning_notebook_executes():
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:  # pragma: no cover - the test extra installs both
        pytest.skip(f"nbclient/nbformat not importable ({exc}); install specsim[test]")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # run with this interpreter's kernel (the venv's python3), from the notebooks folder
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.extra_arguments = []
    t0 = time.perf_counter()
    client.execute()
    wall = time.perf_counter() - t0
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    texts = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                    if o.output_type == "stream")
    assert "best:" in texts and "rows" in texts
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert images, "the plot cell produced no image"
    assert wall < 60, f"notebook took {wall:.1f} s (budget 30 s on an idle machine)"
    assert sys.executable  # the kernel is the venv's python3 (kernelspec in .venv/share/jupyter)
