"""mkdocs hooks of the docs site (mkdocs.yml `hooks:`).

Site-only Markdown. The pages are read on the forge too, where an mkdocstrings directive
(`::: magrpo.team.team.Team`) or a collapsible block (`??? quote`) would show as bare text. Such blocks
are written inside an HTML comment that starts with `site:`, which the forge hides and this hook
unwraps before the page is rendered:

    <!-- site:
    ::: magrpo.team.team.Team
    -->

The 404 page is rendered for a server, with links from the site's root (`/index.html`); the site
also reads from the file system (file://, offline), where such a link leaves the site. The 404 page
sits at the site's root, so its links are made relative to it (`./index.html`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

SITE_ONLY = re.compile(r"^<!-- site:[ \t]*\n(.*?)^-->[ \t]*(?:\n|\Z)", re.MULTILINE | re.DOTALL)


def site_only(markdown: str) -> str:
    """The page's Markdown with every `<!-- site: ... -->` block unwrapped (module docstring)."""
    return SITE_ONLY.sub(lambda m: m.group(1), markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return site_only(markdown)


def on_post_build(config: Any, **kwargs: Any) -> None:
    page = Path(config["site_dir"]) / "404.html"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r'\b(href|src)="/(?!/)', r'\1="./', text), encoding="utf-8")
