"""mkdocs hooks of the docs site (mkdocs.yml `hooks:`).

The 404 page is rendered for a server, with links from the site's root (`/index.html`); the site
also reads from the file system (file://, offline), where such a link leaves the site. The 404 page
sits at the site's root, so its links are made relative to it (`./index.html`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def on_post_build(config: Any, **kwargs: Any) -> None:
    page = Path(config["site_dir"]) / "404.html"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r'\b(href|src)="/(?!/)', r'\1="./', text), encoding="utf-8")
