"""Take the README's screenshot of the web page: serve an index, type a query in
headless Chromium, wait for the thumbnails, open the first result, save PNGs.

Run: .venv/bin/python scripts/screenshot_page.py --index ~/.cache/vsekit/index \\
         --query "two dogs playing in the snow" --out docs/search-page.jpg
"""

from __future__ import annotations

import argparse
import shutil
import socket
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from vsekit.index.query import open_collection as open_index
from vsekit.serve.app import create_app


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", default="~/.cache/vsekit/index")
    ap.add_argument("--query", default="two dogs playing in the snow")
    ap.add_argument("--out", default="docs/search-page.jpg")
    args = ap.parse_args()
    coll, model = open_index(args.index)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(coll, model), host="127.0.0.1", port=port, log_level="error")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport={"width": 1200, "height": 820})
        page.goto(f"http://127.0.0.1:{port}/")
        page.fill("#q", args.query)
        page.press("#q", "Enter")
        page.wait_for_selector(".card img")
        done = "i => i.complete && i.naturalWidth > 0"
        page.wait_for_function(f"[...document.querySelectorAll('.card img')].every({done})")
        out = Path(args.out)
        shot = {"type": "jpeg", "quality": 85} if out.suffix == ".jpg" else {}
        page.screenshot(path=str(out), **shot)
        page.locator(".card").first.click()
        page.wait_for_selector("#captions li")
        page.wait_for_function("document.getElementById('full').naturalWidth > 0")
        page.screenshot(path=str(out.with_name(out.stem + "-viewer" + out.suffix)), **shot)
        browser.close()
    server.should_exit = True
    print(f"wrote {out} and {out.with_name(out.stem + '-viewer' + out.suffix)}")


if __name__ == "__main__":
    main()
