"""Read the built docs site in a real headless browser, as a reader's browser shows it.

    python scripts/check_site.py [--site site] [--browser chromium] [--screenshots DIR]

`make docs-check` builds the site (`make docs`) and runs this. Every HTML page of the site is
served from 127.0.0.1 and opened in a headless Chromium, one page after another, in a frame of a
small harness page that this script serves next to the site (nothing is written into the site).
For each page the harness waits for the page's scripts and reports:

- the page loaded (its own <title>, no "404" page in its place);
- every formula was typeset: each `.arithmatex` element that pymdownx.arithmatex leaves holds
  KaTeX's output and none holds a `.katex-error` (a formula KaTeX could not read);
- every image loaded (complete, with a natural width above 0);
- no script error was raised on the page.

The report is one line per failing page; the exit status is 1 when any page fails, 2 when the
browser cannot be found or does not answer. `--screenshots DIR` also saves a 1280x1600 PNG of each
page named with --shoot (the default: the home page, an algorithm page, the benchmarks page and
the architecture page), to look at the site as a reader does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
HARNESS = "/__site_check__.html"
RESULT = "/__site_check_result__"
SHOOT = ("index.html", "algorithms/magrpo.html", "benchmarks.html", "architecture.html")

# The harness: opens each page in an iframe, waits until its math is typeset and its images have
# settled (or `settle_ms` has passed), then posts one JSON record per page back to the server.
HARNESS_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>site check</title></head>
<body><iframe id="f" style="width:1280px;height:900px"></iframe><script>
const pages = %(pages)s, settleMs = %(settle_ms)d, results = [];
function inspect(win, page) {
  const doc = win.document, r = {page: page, errors: win.__errors || []};
  r.title = doc.title;
  r.math = doc.querySelectorAll(".arithmatex").length;
  r.typeset = Array.from(doc.querySelectorAll(".arithmatex")).filter(e => e.querySelector(".katex")).length;
  r.katex_errors = Array.from(doc.querySelectorAll(".katex-error")).map(e => e.getAttribute("title") || e.textContent).slice(0, 3);
  const imgs = Array.from(doc.images);
  r.images = imgs.length;
  r.broken_images = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute("src"));
  r.settled = r.typeset === r.math && imgs.every(i => i.complete);
  return r;
}
function visit(k) {
  if (k === pages.length) {
    fetch("%(result)s", {method: "POST", body: JSON.stringify(results)});
    return;
  }
  const frame = document.getElementById("f"), started = Date.now();
  frame.onload = function () {
    const win = frame.contentWindow;
    function poll() {
      let r;
      try { r = inspect(win, pages[k]); } catch (e) { r = {page: pages[k], errors: [String(e)], settled: true}; }
      if (r.settled || Date.now() - started > settleMs) { results.push(r); visit(k + 1); }
      else setTimeout(poll, 50);
    }
    poll();
  };
  frame.src = "/" + pages[k];
  // errors raised while the page's own scripts run: hook them as soon as the frame has a window
  const hook = setInterval(function () {
    try {
      const win = frame.contentWindow;
      if (win && !win.__errors && win.location.pathname === "/" + pages[k]) {
        win.__errors = [];
        win.addEventListener("error", e => win.__errors.push(String(e.message)));
      }
    } catch (e) {}
    if (frame.contentWindow && frame.contentWindow.__errors) clearInterval(hook);
  }, 5);
}
visit(0);
</script></body></html>"""


def find_browser(name: str | None) -> str:
    for candidate in ([name] if name else BROWSERS):
        path = shutil.which(candidate)
        if path:
            return path
    raise SystemExit(f"check_site: no browser found (tried {', '.join([name] if name else BROWSERS)}); "
                     "install Chromium (on Debian: apt-get install chromium) or pass --browser PATH")


def pages_of(site: Path) -> list[str]:
    return sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")


def serve(site: Path, pages: list[str], settle_ms: int) -> tuple[ThreadingHTTPServer, dict]:
    """A server for the site on a free port of 127.0.0.1, plus the harness and the result slot."""
    got: dict = {}
    done = threading.Event()
    harness = HARNESS_HTML % {"pages": json.dumps(pages), "settle_ms": settle_ms, "result": RESULT}

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self):   # noqa: N802  (http.server's name)
            if self.path == HARNESS:
                body = harness.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def do_POST(self):  # noqa: N802
            if self.path != RESULT:
                self.send_error(404)
                return
            got["results"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()
            done.set()

        def log_message(self, *args):   # quiet: the report says what failed
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    got["done"] = done
    return server, got


def stop_group(proc: subprocess.Popen) -> None:
    """Kill the browser and the helper processes it started (its own process group), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def browser_command(browser: str, profile: str, *extra: str) -> list[str]:
    return [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-extensions", "--disable-background-networking", f"--user-data-dir={profile}", *extra]


def problems(r: dict) -> list[str]:
    out = []
    if not r.get("title") or r["title"].startswith("404"):
        out.append(f"did not load (title {r.get('title')!r})")
    if r.get("typeset", 0) < r.get("math", 0):
        out.append(f"{r['math'] - r['typeset']} of {r['math']} formulas not typeset")
    if r.get("katex_errors"):
        out.append(f"KaTeX could not read: {r['katex_errors']}")
    if r.get("broken_images"):
        out.append(f"images that did not load: {r['broken_images']}")
    if r.get("errors"):
        out.append(f"script errors: {r['errors'][:3]}")
    return out


def check(site: Path, browser: str, settle_ms: int = 8000, timeout_s: float = 300.0,
          screenshots: Path | None = None, shoot: tuple[str, ...] = SHOOT) -> tuple[list[dict], list[str]]:
    """Open every page of `site`; return the per-page records and one line per failing page."""
    pages = pages_of(site)
    if not pages:
        raise SystemExit(f"check_site: no HTML pages under {site} (build the site first: make docs)")
    server, got = serve(site, pages, settle_ms)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # Chromium's helper processes may still write to the profile while it is removed: a leftover
        # file there is no failure of the site.
        with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
            proc = subprocess.Popen(browser_command(browser, profile, base + HARNESS),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                answered = got["done"].wait(timeout_s)
            finally:
                stop_group(proc)
            if not answered:
                print(f"check_site: the browser gave no report in {timeout_s:.0f} s", file=sys.stderr)
                raise SystemExit(2)
            for page in shoot if screenshots else ():
                screenshots.mkdir(parents=True, exist_ok=True)
                png = screenshots / (page.replace("/", "_").removesuffix(".html") + ".png")
                subprocess.run(browser_command(browser, profile, f"--screenshot={png.resolve()}",
                                               "--window-size=1280,1600", "--hide-scrollbars",
                                               "--virtual-time-budget=5000", f"{base}/{page}"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
    finally:
        server.shutdown()
    results = got["results"]
    failing = [f"{r['page']}: " + "; ".join(p) for r in results if (p := problems(r))]
    seen = {r["page"] for r in results}
    failing += [f"{page}: no report" for page in pages if page not in seen]
    return results, failing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--site", type=Path, default=Path("site"), help="the built site (default: site)")
    p.add_argument("--browser", help=f"browser executable (default: the first of {', '.join(BROWSERS)} on PATH)")
    p.add_argument("--settle-ms", type=int, default=8000,
                   help="how long a page may take to typeset its math and load its images (default 8000)")
    p.add_argument("--screenshots", type=Path, help="also save screenshots of the --shoot pages here")
    p.add_argument("--shoot", default=",".join(SHOOT), help="pages to screenshot, comma-separated")
    args = p.parse_args(argv)
    results, failing = check(args.site, find_browser(args.browser), args.settle_ms, screenshots=args.screenshots,
                             shoot=tuple(s for s in args.shoot.split(",") if s))
    math = sum(r.get("math", 0) for r in results)
    images = sum(r.get("images", 0) for r in results)
    print(f"check_site: {len(results)} pages, {math} formulas, {images} images; "
          f"{len(failing)} page(s) failing")
    for line in failing:
        print("  " + line)
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
