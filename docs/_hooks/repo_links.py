"""mkdocs hook: links from a guide page to repository files outside docs/.

The guide links repository files relatively (``../calibration/README.md``,
``../scenarios/235b_async.yaml``) so that the links work where the Markdown is read on GitHub. The
built site has no page for those files, and ``mkdocs build --strict`` would fail on them. This hook
rewrites every such link whose target exists in the repository: to
``<repo_url>/blob/<extra.repo_branch or main>/<path>`` when mkdocs.yml sets ``repo_url``, else to
its link text (the guide's link texts name the file). A link to a file that does not exist is left
as written, so ``--strict`` still reports it; links between pages are left to mkdocs.
"""

from __future__ import annotations

import re
from pathlib import Path

# [text](target) or [text](target "title"), not an image; the text may hold `code`
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]+)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~)")


def _rewrite(match: re.Match, page_dir: Path, docs: Path, root: Path, repo: str | None, branch: str) -> str:
    text, target = match.group("text"), match.group("target")
    if "://" in target or target.startswith(("#", "mailto:", "/")):
        return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = (page_dir / path).resolve()
    if resolved == docs or docs in resolved.parents or not resolved.exists():
        return match.group(0)
    try:
        rel = resolved.relative_to(root)
    except ValueError:
        return match.group(0)
    if repo:
        return f"[{text}]({repo.rstrip('/')}/blob/{branch}/{rel.as_posix()}{'#' + anchor if anchor else ''})"
    return text


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = Path(config.config_file_path).resolve().parent
    page_dir = (docs / page.file.src_path).parent
    repo = config.get("repo_url")
    branch = (config.get("extra") or {}).get("repo_branch", "main")
    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        out.append(line if fenced else _LINK.sub(lambda m: _rewrite(m, page_dir, docs, root, repo, branch), line))
    return "".join(out)
