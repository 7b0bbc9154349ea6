"""The documentation: the user guide builds with mkdocs --strict (a broken link or a page missing
from the nav fails), the README stays a front door, and neither holds project history."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the README is a front door: what it answers, set-up, a tour, how far to trust it, where next
README_MAX_LINES = 200
#: history belongs in CHANGELOG.md, not in the guide ("round 7", "since round 12", "this round")
HISTORY = re.compile(r"\b(?:round \d+|rounds \d|this round|since round|until round|previous round)\b", re.IGNORECASE)


def test_user_guide_builds_strict(tmp_path):
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "scenario" / "index.html").is_file()


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    ci_command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci_command.startswith("python -m venv .venv") and ci_command in text   # CI runs the README's command 2


def test_no_history_in_the_user_guide():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in pages
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if HISTORY.search(line)]
    assert not hits, "history goes into CHANGELOG.md:\n" + "\n".join(hits)


def test_every_guide_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts]
    assert [p for p in pages if p not in nav] == []
