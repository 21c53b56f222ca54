"""Headless Chromium under Selenium for the browser tests, and what it logged.

Debian's ``chromium`` and ``chromium-driver`` (``make test`` installs them); axe-core from npm in
``.venv/npm`` (``scripts/install-browser-deps.sh``). A missing one fails the tests under CI and
skips them elsewhere, as :func:`tests.support.tools.require_tool` does.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.tools import require_tool

# scripts/install-browser-deps.sh puts it in the virtual environment that runs the tests.
AXE_PATH = Path(sys.prefix) / "npm" / "node_modules" / "axe-core" / "axe.min.js"
WINDOW_SIZE = "1280,1600"
# Schemes that never leave the browser.
LOCAL_SCHEMES = frozenset({"data", "blob", "about", "chrome", "devtools"})


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def axe_source() -> str:
    """axe-core's script, as the npm step installed it."""
    if not AXE_PATH.is_file():
        _missing(f"axe-core is not installed at {AXE_PATH} (make test installs it)")
    return AXE_PATH.read_text()


def start_chromium() -> Any:
    """A headless Chromium that may play audio without a gesture, with its console and
    network (performance) logs kept."""
    chromium = require_tool("chromium")
    chromedriver = require_tool("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:  # pragma: no cover - the dev extra installs it
        _missing("selenium is not installed (pip install -e '.[dev]')")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--autoplay-policy=no-user-gesture-required",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        f"--window-size={WINDOW_SIZE}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))


@dataclass
class BrowserLogs:
    """The console and network entries of a driver, drained as they are read (Chromium hands
    each entry out once) and kept here for the whole module."""

    driver: Any
    console: list[dict[str, Any]] = field(default_factory=list)
    request_urls: list[str] = field(default_factory=list)

    def drain(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The console entries and request URLs since the last drain."""
        console = list(self.driver.get_log("browser"))
        urls: list[str] = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") in ("Network.requestWillBeSent", "Network.webSocketCreated"):
                params = message["params"]
                url = params["request"]["url"] if "request" in params else params["url"]
                urls.append(url)
        self.console.extend(console)
        self.request_urls.extend(urls)
        return console, urls


def severe(entries: list[dict[str, Any]]) -> list[str]:
    """The console entries at level SEVERE (errors, uncaught exceptions, failed loads)."""
    return [e["message"] for e in entries if e.get("level") == "SEVERE"]


def foreign_requests(urls: list[str], origin: str) -> list[str]:
    """The URLs that leave for a host other than ``origin``'s (WebSockets: same host and port,
    ws/wss)."""
    own = urlsplit(origin)
    foreign = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme in LOCAL_SCHEMES:
            continue
        if (parts.hostname, parts.port) != (own.hostname, own.port):
            foreign.append(url)
    return foreign
