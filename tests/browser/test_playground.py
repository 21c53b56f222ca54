"""The playground (``/playground``) in a real headless Chromium against a real stack: it loads
clean and offline, speaks over the WebSocket with the words lit in step with what is heard,
renders a job through its progress bar to two valid downloads, speaks the stand-in LLM's
reply, names a bad key, stops within 200 ms, and axe-core finds nothing serious.

Screenshots of each state go to ``<pytest's base temp>/playground`` (printed at the start).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import webvtt
from selenium.webdriver.common.keys import Keys

from tests.browser.chrome import BrowserLogs, foreign_requests, severe
from tests.browser.page import Playground, Sample
from tests.support.stack import ACME_KEY, Stack
from voicelane.api.ollama_standin import OllamaStandin, default_reply
from voicelane.common.audio import probe

pytestmark = [pytest.mark.integration, pytest.mark.browser]

LONG_TEXT = (
    "The river ran quietly past the old mill, where the miller's daughter counted sacks of "
    "flour every morning. Nobody in the village remembered when the wheel had last stopped. "
    "In winter the ice crept along the banks, and the children skated on the pond behind the "
    "church until the bells called them home for supper."
)
JOB_TEXT = (
    "Chapter one. The lighthouse keeper climbed the stairs at dusk. "
    "He lit the lamp and watched the ships pass in the dark."
)
MARKDOWN = (
    "# The Harbour\n\nBoats came in with the tide.\n\n"
    "# The Market\n\nFish were sold before the sun was up.\n"
)
QUESTION = "What should I pack for a weekend in the mountains?"
# How far the highlighted word may lead or trail the played time: one display frame, the
# sampling script's own turn and a word's rounding.
SYNC_TOLERANCE_MS = 120.0


@pytest.fixture
def page(driver: Any, stack: Stack, shots: Path, logs: BrowserLogs) -> Iterator[Playground]:
    """The page loaded afresh with the tenant's key; the logs drained so a test reads its own."""
    logs.drain()
    playground = Playground(driver, f"{stack.api_url}/playground", shots)
    playground.open(ACME_KEY)
    yield playground


def assert_clean(logs: BrowserLogs, origin: str) -> None:
    """No console errors and no request to another host since the last drain."""
    console, urls = logs.drain()
    assert severe(console) == []
    assert urls, "the network log recorded nothing"
    assert foreign_requests(urls, origin) == []


def squash(text: str) -> str:
    return re.sub(r"[\s*]+", "", text)


def start_speaking(page: Playground, text: str) -> None:
    page.type("text", text)
    page.click("speak")


def test_the_page_loads_with_no_console_errors_and_no_other_host(
    page: Playground, logs: BrowserLogs, stack: Stack
) -> None:
    page.shoot("01-loaded")
    console, urls = logs.drain()
    assert severe(console) == []
    assert f"{stack.api_url}/playground" in urls
    assert foreign_requests(urls, stack.api_url) == []
    assert any(url.startswith(f"{stack.api_url}/v1/voices") for url in urls)
    # The key lives only in the tab's session storage.
    stored = page.driver.execute_script(
        "return [Object.values(sessionStorage), Object.values(localStorage), document.cookie]"
    )
    assert ACME_KEY in stored[0] and ACME_KEY not in stored[1] and ACME_KEY not in stored[2]


def test_speak_plays_within_3_s_and_shows_the_first_audio_time(
    page: Playground, logs: BrowserLogs, stack: Stack
) -> None:
    start_speaking(page, LONG_TEXT)
    page.wait(lambda: page.played_ms() > 1000, 3, "played-ms past 1,000 ms within 3 s")
    first_audio_ms = page.number("first-audio-ms")
    assert first_audio_ms is not None and 0 < first_audio_ms < 3000
    page.shoot("02-speak")
    page.click("stop")
    assert_clean(logs, stack.api_url)


def test_the_highlighted_word_advances_in_step_with_played_ms(
    page: Playground, logs: BrowserLogs, stack: Stack
) -> None:
    start_speaking(page, LONG_TEXT)
    page.wait(lambda: page.played_ms() > 300 and page.sample().index >= 0, 5, "a highlighted word")
    samples = page.samples(count=16, interval_ms=150)
    page.shoot("03-words")
    page.click("stop")
    assert_in_step(samples)
    # The captions hold the text spoken, one timed element per word (espeak times words).
    assert squash(page.text("captions")) == squash(LONG_TEXT)
    assert samples[-1].count > 10  # words, not its 4 sentences
    assert_clean(logs, stack.api_url)


def assert_in_step(samples: list[Sample]) -> None:
    played = [s.played_ms for s in samples]
    indexes = [s.index for s in samples]
    assert all(i >= 0 for i in indexes), indexes
    assert played == sorted(played) and played[-1] - played[0] > 1500, played
    assert indexes == sorted(indexes) and indexes[-1] - indexes[0] >= 3, indexes
    # played-ms follows the audio as heard (one second a second), not its arrival (espeak
    # renders the whole text in well under a second).
    rate = (played[-1] - played[0]) / (samples[-1].now_ms - samples[0].now_ms)
    assert 0.75 < rate < 1.25, rate
    for s in samples:
        assert s.current_start_ms is not None
        # Not ahead of what is heard, and not behind it: the next word has not begun.
        assert s.current_start_ms <= s.played_ms + SYNC_TOLERANCE_MS, s
        if s.next_start_ms is not None:
            assert s.next_start_ms > s.played_ms - SYNC_TOLERANCE_MS, s


def run_job(page: Playground) -> list[float]:
    """Submit, follow the progress bar to its end; the fractions it showed on the way."""
    page.click("job-submit")
    seen: list[float] = []

    def finished() -> bool:
        value, maximum = page.driver.execute_script(
            "const p = document.querySelector('[data-testid=\"job-progress\"]');"
            "return [p.value, p.max];"
        )
        seen.append(value / maximum)
        return bool(value >= maximum and page.by("job-download").get_attribute("href"))

    page.wait(finished, 60, "the job's progress bar to reach its end and the links")
    return seen


def assert_downloads(page: Playground, words: list[str]) -> None:
    """Both links fetch: the audio decodes, the subtitles parse and hold the text's words."""
    with httpx.Client(
        headers={"Authorization": f"Bearer {ACME_KEY}"}, follow_redirects=True, timeout=30
    ) as client:
        audio_href = page.by("job-download").get_attribute("href")
        subtitles_href = page.by("job-subtitles").get_attribute("href")
        assert audio_href and subtitles_href
        audio = client.get(audio_href)
        subtitles = client.get(subtitles_href)
    assert audio.status_code == 200 and subtitles.status_code == 200
    info = probe(audio.content)
    assert info.duration_s > 2.0 and info.channels >= 1
    cues = webvtt.from_buffer(io.StringIO(subtitles.text)).captions
    cue_ms = [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in cues]
    assert cue_ms and all(start < end for start, end in cue_ms), cue_ms
    assert cue_ms == sorted(cue_ms) and cue_ms[-1][1] <= info.duration_s * 1000 + 300
    spoken = squash(" ".join(c.text for c in cues)).lower()
    assert all(word.lower() in spoken for word in words)


def test_a_job_completes_through_the_progress_bar_and_both_links_download(
    page: Playground, logs: BrowserLogs, stack: Stack
) -> None:
    page.type("text", JOB_TEXT)
    seen = run_job(page)
    assert seen == sorted(seen) and seen[0] < 1.0 and seen[-1] == 1.0
    page.shoot("04-job")
    assert page.by("job-download").is_displayed() and page.by("job-subtitles").is_displayed()
    assert_downloads(page, ["lighthouse", "keeper", "ships"])
    assert_clean(logs, stack.api_url)


def test_an_uploaded_markdown_file_renders_as_a_job(
    page: Playground, logs: BrowserLogs, stack: Stack, tmp_path: Path
) -> None:
    document = tmp_path / "harbour.md"
    document.write_text(MARKDOWN)
    page.by("job-file").send_keys(str(document))
    seen = run_job(page)
    assert seen[-1] == 1.0
    page.shoot("05-job-file")
    assert_downloads(page, ["harbour", "tide", "market", "sun"])
    assert_clean(logs, stack.api_url)


def test_a_chat_reply_is_shown_and_spoken(
    page: Playground, logs: BrowserLogs, stack: Stack, standin: OllamaStandin
) -> None:
    page.type("chat-input", QUESTION)
    page.click("chat-send")
    page.wait(lambda: page.text("chat-reply"), 15, "the reply's first words")
    page.wait(lambda: page.played_ms() > 1000, 15, "the reply to play past 1,000 ms")
    body = next(r.body for r in reversed(standin.requests) if r.body and r.body.get("messages"))
    expected = squash(default_reply(body))
    page.wait(lambda: squash(page.text("chat-reply")) == expected, 15, "the whole reply")
    page.shoot("06-chat")
    page.click("stop")
    assert_clean(logs, stack.api_url)


def test_stop_halts_playback_within_200_ms(
    page: Playground, logs: BrowserLogs, stack: Stack
) -> None:
    start_speaking(page, LONG_TEXT)
    page.wait(lambda: page.played_ms() > 1000, 5, "playback")
    # Read and click in one script, then read twice 300 ms apart by the page's timer.
    at_stop, after_300, after_600 = page.driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const played = () =>
          Number(document.querySelector('[data-testid="played-ms"]').textContent.trim());
        const reads = [played()];
        document.querySelector('[data-testid="stop"]').click();
        setTimeout(() => {
          reads.push(played());
          setTimeout(() => { reads.push(played()); done(reads); }, 300);
        }, 300);
        """
    )
    page.shoot("07-stopped")
    assert after_300 - at_stop < 200, (at_stop, after_300)
    assert after_600 - after_300 < 200, (after_300, after_600)
    assert_clean(logs, stack.api_url)


PLAYED_300_MS_APART_JS = """
const done = arguments[arguments.length - 1];
const played = () =>
  Number(document.querySelector('[data-testid="played-ms"]').textContent.trim());
const first = played();
setTimeout(() => done([first, played()]), 300);
"""


def test_a_bad_key_is_named_in_the_error(page: Playground, logs: BrowserLogs) -> None:
    page.type("api-key", "not-a-real-key")
    start_speaking(page, "Hello there.")
    page.wait(lambda: page.by("error").is_displayed() and page.text("error"), 10, "an error")
    message = page.text("error")
    assert re.search(r"key|unauthenticated|unauthori[sz]ed", message, re.IGNORECASE), message
    assert page.played_ms() == 0
    page.shoot("08-bad-key")
    logs.drain()  # the refused request is logged by Chromium itself


def test_invalid_ssml_is_named_with_its_line_and_column(page: Playground) -> None:
    start_speaking(page, "<speak>\nHello <break time='soon'/> there.\n</speak>")
    page.wait(lambda: page.by("error").is_displayed() and page.text("error"), 10, "an error")
    assert re.search(r"line 2, column \d+", page.text("error")), page.text("error")
    assert page.played_ms() == 0


def test_speak_works_from_the_keyboard_alone(page: Playground) -> None:
    page.by("text").click()
    for _ in range(12):  # Tab along the controls to the Speak button
        page.driver.switch_to.active_element.send_keys(Keys.TAB)
        if page.driver.switch_to.active_element.get_attribute("data-testid") == "speak":
            break
    else:
        raise AssertionError("Tab never reached the Speak button")
    page.driver.switch_to.active_element.send_keys(Keys.ENTER)
    page.wait(lambda: page.played_ms() > 500, 5, "playback started from the keyboard")
    page.driver.switch_to.active_element.send_keys(Keys.TAB)  # to Stop
    assert page.driver.switch_to.active_element.get_attribute("data-testid") == "stop"
    page.driver.switch_to.active_element.send_keys(Keys.ENTER)
    before, after = page.driver.execute_async_script(PLAYED_300_MS_APART_JS)
    assert after - before < 200, (before, after)


def run_axe(page: Playground, axe: str) -> list[dict[str, Any]]:
    """axe-core's violations of impact serious or critical on the page as it is now."""
    page.driver.execute_script(axe)
    result = page.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then((r) => done(r.violations), (e) => done([{error: String(e)}]));"
    )
    return [
        {"id": v.get("id"), "impact": v.get("impact"), "nodes": len(v.get("nodes", []))}
        for v in result
        if "error" in v or v.get("impact") in ("serious", "critical")
    ]


def test_axe_finds_no_serious_or_critical_violation(
    page: Playground, logs: BrowserLogs, stack: Stack, axe: str
) -> None:
    assert run_axe(page, axe) == []
    # Again with captions, a finished job's links and an error on show.
    page.type("text", JOB_TEXT)
    run_job(page)
    page.type("api-key", "not-a-real-key")
    start_speaking(page, "Hello there.")
    page.wait(lambda: page.text("error"), 10, "an error")
    assert run_axe(page, axe) == []
