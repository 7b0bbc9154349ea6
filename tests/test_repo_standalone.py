"""The repository stands alone: no file points outside it, and the documents it cites exist with
the sections it cites (a clone has no ../shared)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["README.md", "pyproject.toml", "specsim", "scenarios", "calibration", "docs", "CHANGELOG.md", "mkdocs.yml",
           "benchmarks", "notebooks", "tests"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".ipynb", ".txt"}
OUTSIDE = re.compile(r"\.\./shared|shared/reference|shared/DESIGN|(?<![\w/])published\.md|(?<![\w/])DESIGN\.md")


def _files():
    for entry in SCANNED:
        p = ROOT / entry
        paths = [p] if p.is_file() else sorted(p.rglob("*")) if p.is_dir() else []
        for f in paths:
            if f.is_file() and f.suffix in SUFFIXES and f.resolve() != Path(__file__).resolve():
                yield f


def test_no_reference_outside_the_repository():
    hits = [f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
            for f in _files() for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == []


def _headings(path: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.+)$", path.read_text(), flags=re.MULTILINE)}


def test_cited_sections_of_the_design_exist():
    """Every `docs/design.md "Section"` (or `docs/design.md, "Section"`) cited in the code and docs is a
    heading of docs/design.md."""
    headings = _headings(ROOT / "docs" / "design.md")
    cite = re.compile(r'docs/design\.md`?,?\s*(?:\(section\s*)?"([^"]+)"(?:\s+and\s+"([^"]+)")?')
    cited = {(str(f.relative_to(ROOT)), s) for f in _files() for m in cite.finditer(f.read_text(errors="replace"))
             for s in m.groups() if s}
    assert cited, "expected some citations of docs/design.md sections"
    assert {(f, s) for f, s in cited if s not in headings} == set()


@pytest.mark.parametrize("section", ["Measured 8B results to validate against",
                                     "Speculative decoding in RL systems (ReSpec, arXiv 2510.26475, MLSys 2026)",
                                     "Hardware (per GPU, dense, no sparsity)", "Models (HF config.json)",
                                     "RL workloads"])
def test_published_figures_are_in_the_repository(section):
    path = ROOT / "calibration" / "published" / "README.md"
    assert any(h.startswith(section) for h in _headings(path)), section
