"""The playground as the browser tests drive it: its controls by their ``data-testid``, the
numbers it shows, and samples of its state taken inside the page (one script, one instant).

The page's contract (docs/playground.md): every control carries a stable ``data-testid``;
``played-ms`` and ``first-audio-ms`` hold integers (milliseconds); inside ``captions`` every
word (or sentence) is an element with ``data-start-ms`` (its start in the audio as played) and
the one being heard carries ``aria-current="true"``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

T = TypeVar("T")

VOICES_JS = "return document.querySelectorAll('[data-testid=\"voice\"] option').length;"
# One script that reads the playback clock and the highlighted caption together.
SAMPLE_JS = """
const root = document.querySelector('[data-testid="captions"]');
const units = root ? Array.from(root.querySelectorAll('[data-start-ms]')) : [];
const index = units.findIndex((u) => u.getAttribute('aria-current') === 'true');
const start = (u) => (u ? Number(u.dataset.startMs) : null);
return {
  now_ms: performance.now(),
  played_ms: Number(document.querySelector('[data-testid="played-ms"]').textContent.trim()),
  index: index,
  count: units.length,
  current_start_ms: index >= 0 ? start(units[index]) : null,
  next_start_ms: index >= 0 ? start(units[index + 1]) : null,
  current_text: index >= 0 ? units[index].textContent : null,
};
"""

# Samples taken every ``interval_ms`` inside the page, handed back when ``count`` are in.
SAMPLES_JS = (
    "const sample = () => {\n"
    + SAMPLE_JS
    + """};
const [count, intervalMs, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
const samples = [];
const tick = () => {
  samples.push(sample());
  if (samples.length >= count) { done(samples); } else { setTimeout(tick, intervalMs); }
};
tick();
"""
)


@dataclass(frozen=True)
class Sample:
    """The page's state at one instant (``now_ms``: the page's monotonic clock)."""

    now_ms: float
    played_ms: float
    index: int
    count: int
    current_start_ms: float | None
    next_start_ms: float | None
    current_text: str | None


class Playground:
    """The page in one Chromium, at ``url``, with screenshots kept in ``shots``."""

    def __init__(self, driver: Any, url: str, shots: Path) -> None:
        self.driver = driver
        self.url = url
        self.shots = shots

    def open(self, key: str) -> None:
        """Load the page afresh and type the API key."""
        self.driver.get(self.url)
        self.wait(lambda: self.by("speak").is_displayed(), 30, "the page to load")
        self.type("api-key", key + Keys.TAB)  # leaving the field loads the voices
        self.wait(lambda: self.driver.execute_script(VOICES_JS) > 1, 15, "the voices of the API")

    def by(self, testid: str) -> WebElement:
        element: WebElement = self.driver.find_element("css selector", f'[data-testid="{testid}"]')
        return element

    def type(self, testid: str, text: str) -> None:
        element = self.by(testid)
        element.clear()
        element.send_keys(text)

    def click(self, testid: str) -> None:
        self.by(testid).click()

    def text(self, testid: str) -> str:
        return str(self.by(testid).text).strip()

    def number(self, testid: str) -> float | None:
        """The number an element shows; None while it shows none."""
        raw = self.driver.execute_script(
            "return document.querySelector(arguments[0]).textContent.trim();",
            f'[data-testid="{testid}"]',
        )
        try:
            return float(raw)
        except (TypeError, ValueError):
            return None

    def played_ms(self) -> float:
        return self.number("played-ms") or 0.0

    def sample(self) -> Sample:
        return Sample(**self.driver.execute_script(SAMPLE_JS))

    def samples(self, count: int, interval_ms: int) -> list[Sample]:
        """``count`` samples ``interval_ms`` apart, taken by the page's own timer."""
        raw = self.driver.execute_async_script(SAMPLES_JS, count, interval_ms)
        return [Sample(**s) for s in raw]

    def wait(self, condition: Callable[[], T], timeout_s: float, what: str) -> T:
        """Until ``condition`` returns something truthy (WebDriverWait's polling)."""
        result: T = WebDriverWait(self.driver, timeout_s, poll_frequency=0.05).until(
            lambda _driver: condition(), message=f"waiting for {what}"
        )
        return result

    def shoot(self, name: str) -> Path:
        """A screenshot of the whole page as it is now, kept under the run's output folder."""
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path
