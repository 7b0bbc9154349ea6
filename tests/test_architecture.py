"""The folder tree is the layer diagram (docs/design.md): each top-level folder of specsim/ imports
only the layers below it, simpy is imported only under sim/, and no module imports another
module's `_private` names. Every import is read from the source (function-level imports too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specsim"

#: bottom to top; a module may import its own layer and the layers before it
LAYERS = ["errors", "atomic", "inputs", "catalog", "cost", "workload", "policy", "scenario", "world", "sim", "study", "validate",
          "calibrate", "explain", "cli"]
#: the package face: `python -m specsim` runs the CLI; `specsim/__init__.py` holds the version only
FACE = {"__init__", "__main__"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, imported names, line) for every specsim import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
    return [(m, names, line) for m, names, line in out if m in ("specsim", "simpy")
            or m.startswith(("specsim.", "simpy."))]


def test_every_top_level_entry_is_a_layer_or_the_face():
    entries = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
               if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert entries - FACE == set(LAYERS), "docs/design.md and LAYERS list the layers; update both"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_only(path):
    here = _layer(path)
    if here in FACE:
        return
    rank = LAYERS.index(here)
    for mod, names, line in _imports(path):
        if mod.startswith("simpy"):
            assert here == "sim", f"{path.name}:{line} imports simpy outside sim/"
            continue
        targets = [mod] if mod != "specsim" else [f"specsim.{n}" for n in names]
        for target in targets:
            top = target.split(".")[1] if "." in target else ""
            if top in ("__version__", ""):
                continue
            assert top in LAYERS, f"{path.name}:{line} imports {target}, which is in no layer"
            assert LAYERS.index(top) <= rank, (
                f"{path.relative_to(PACKAGE)}:{line} imports {target}: {top}/ sits above {here}/")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_cross_file_private_imports(path):
    for mod, names, line in _imports(path):
        private = [n for n in names if n.startswith("_") and not n.startswith("__")]
        assert not private, f"{path.relative_to(PACKAGE)}:{line} imports {private} from {mod}"
        assert not any(part.startswith("_") and not part.startswith("__") for part in mod.split(".")), (
            f"{path.relative_to(PACKAGE)}:{line} imports the private module {mod}")


def test_the_checks_see_a_violation(tmp_path):
    """The walker finds function-level and relative imports (a test that can fail)."""
    bad = tmp_path / "specsim" / "cost" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("def f():\n    from specsim.study.sweep import _x\n    from . import roofline\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "specsim"
    try:
        found = _imports(bad)
    finally:
        PACKAGE = saved
    assert ("specsim.study.sweep", ["_x"], 2) in found
    assert ("specsim.cost", ["roofline"], 3) in found
