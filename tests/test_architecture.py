"""The folder tree is the layer diagram (docs/design.md): each top-level folder of specsim/ imports
only the layers below it, simpy is imported only under sim/, and no module imports another
module's `_private` names. Every import is read from the source (function-level imports too).
Imports sit at the top of a module: one inside a function names a module of LAZY_MODULES (heavy or
optional) or is one of LAZY_OWN's sites, each with its reason."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specsim"

#: bottom to top; a module may import its own layer and the layers before it
LAYERS = ["errors", "atomic", "inputs", "catalog", "cost", "workload", "policy", "scenario", "world", "sim", "study", "validate",
          "calibrate", "explain", "cli"]
#: the package face: `python -m specsim` runs the CLI; `specsim/__init__.py` holds the version only
FACE = {"__init__", "__main__"}

#: modules a function may import (top-level name -> why it is not imported with the module)
LAZY_MODULES = {
    "matplotlib": "about 1-2 s to import: loaded where a figure is drawn, so `specsim --help` and `check` go without",
    "pandas": "about 1 s: the bottom layer's readers (inputs.py) and the GPU-side collector load it for a frame only",
    "pyarrow": "Parquet output only (atomic.write_parquet); heavy",
    "ray": "optional: the Ray backend (`--backend ray`)",
    "torch": "optional: `specsim calibrate collect` on a GPU machine",
    "aiconfigurator_core": "optional: the kernel tables' source (`specsim calibrate kernels`)",
    "prometheus_client": "optional: reading an engine's /metrics text (`calibrate acceptance`)",
    "fcntl": "POSIX only: the results folder's lock",
    "resource": "POSIX only: the planner's CPU-time line",
    "scipy": "scipy.stats (~0.5 s) and scipy.optimize (~0.35-0.45 s) over the scipy.special every process loads: "
             "the fitters load them when they fit (calibrate/'s, workload/lengths/fit.py) and the τ inversions "
             "scipy.optimize at their first call (workload/acceptance/laws.brentq), so a simulation worker and a "
             "command that fits nothing (run, check, --help) start without them",
}
#: specsim's own modules imported inside a function: (file under specsim/, function, module) -> why
LAZY_OWN = {
    ("cli/launch.py", "main", "specsim.cli.app"):
        "a Ctrl-C while the command line imports exits 130 with one line (launch.py's doc)",
}
#: the most function-level imports of specsim's own modules (issue #45)
MAX_LAZY_OWN = 40


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


def _walk_a_planted_module(tmp_path, text: str, walker):
    """`walker` over specsim/cost/bad.py holding `text`, in a package rooted at tmp_path."""
    global PACKAGE
    bad = tmp_path / "specsim" / "cost" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(text)
    saved, PACKAGE = PACKAGE, tmp_path / "specsim"
    try:
        return walker(bad)
    finally:
        PACKAGE = saved


def test_the_checks_see_a_violation(tmp_path):
    """The walker finds function-level and relative imports (a test that can fail)."""
    found = _walk_a_planted_module(tmp_path, "def f():\n    from specsim.study.sweep import _x\n"
                                   "    from . import roofline\n", _imports)
    assert ("specsim.study.sweep", ["_x"], 2) in found
    assert ("specsim.cost", ["roofline"], 3) in found


def _function_imports(path: Path) -> list[tuple[str, str, int]]:
    """(function, imported module, line) for every import statement inside a function of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    out = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if function is not None and isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    out.append((function, ".".join(base + ([child.module] if child.module else [])), child.lineno))
                else:
                    out.append((function, child.module or "", child.lineno))
            elif function is not None and isinstance(child, ast.Import):
                out.extend((function, a.name, child.lineno) for a in child.names)
            visit(child, function)

    visit(tree, None)
    return out


@functools.cache
def _lazy_sites() -> tuple[tuple[str, str, str, int], ...]:
    """Every function-level import of the package (read once for the three tests that check them)."""
    return tuple((str(p.relative_to(PACKAGE)), fn, mod, line) for p in _modules() for fn, mod, line in _function_imports(p))


def _own(module: str) -> bool:
    return module == "specsim" or module.startswith("specsim.")


def test_function_level_imports_are_allow_listed():
    """A module is imported at the top of the module that uses it, unless it is heavy or optional
    (LAZY_MODULES) or the site is listed with its reason (LAZY_OWN)."""
    stray = []
    for rel, fn, mod, line in _lazy_sites():
        if (rel, fn, mod) in LAZY_OWN:
            continue
        if not _own(mod) and mod.split(".")[0] in LAZY_MODULES:
            continue
        stray.append(f"{rel}:{line} imports {mod} inside {fn}()")
    assert not stray, ("import these at the top of the module (or list the site with its reason in "
                       "tests/test_architecture.py):\n" + "\n".join(stray))


def test_few_function_level_imports_of_specsims_own_modules():
    own = [site for site in _lazy_sites() if _own(site[2])]
    assert len(own) <= MAX_LAZY_OWN, f"{len(own)} function-level imports of specsim's own modules (at most {MAX_LAZY_OWN})"


def test_the_allow_lists_name_existing_sites():
    """A hoisted site leaves its allow-list entry (no stale permission)."""
    sites = {(rel, fn, mod) for rel, fn, mod, _ in _lazy_sites()}
    listed = set(LAZY_OWN)
    assert listed <= sites, sorted(listed - sites)


def test_the_function_level_walker_sees_a_lazy_import(tmp_path):
    found = _walk_a_planted_module(tmp_path, "import math\n\ndef f():\n    from specsim.study.sweep import x\n"
                                   "    def g():\n        import matplotlib\n    from . import roofline\n",
                                   _function_imports)
    assert found == [("f", "specsim.study.sweep", 4), ("g", "matplotlib", 6), ("f", "specsim.cost", 7)]
