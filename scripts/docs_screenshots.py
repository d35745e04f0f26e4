"""Screenshots for the manual and for looking at it, in headless Debian chromium.

    .venv/bin/python scripts/docs_screenshots.py report run.html docs/assets/html-report.png
    .venv/bin/python scripts/docs_screenshots.py page site/index.html /tmp/home.png

`report`: the page `report --html` wrote, at 1200x900, its top (what the manual shows in
"Inspecting a run"). `page`: any local HTML file (a built manual page) at 1400x1000, wide
enough for the manual's navigation, full height; `top`: the same, its first screen.
Drives the system's chromium through playwright (never `playwright install`: no browser
is downloaded); nothing is fetched from the network.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def shoot(kind: str, html: Path, png: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH: apt-get install chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        size = {"width": 1200, "height": 900} if kind == "report" else \
            {"width": 1400, "height": 1000}
        page = browser.new_page(viewport=size)
        page.goto(html.resolve().as_uri())
        page.wait_for_load_state("load")
        png.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(png), full_page=(kind == "page"))
        browser.close()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("report", "page", "top"):
        raise SystemExit(__doc__)
    shoot(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
