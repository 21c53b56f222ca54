"""The SDK's stream figures (voicelane.client.stats), against the fake Speech server (see helpers.py
for the rules every test here follows)."""

from __future__ import annotations

import pytest

from tests.support.fake_speech_server import FakeSpeechServer
from tests.unit.client.helpers import TEXT, async_test, new_client, only_rendered


@async_test
async def test_stats_are_populated_and_consistent() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.chunk_delay_s = 0.001
        result = await client.synthesize_pcm(TEXT)
    stats = result.stats
    encoded = only_rendered(server)
    assert stats.request_id == encoded.request_id
    assert stats.chunks == len(encoded.chunks) == len(stats.server_delays_ms)
    assert stats.packets == encoded.packets
    assert stats.audio_s == pytest.approx(encoded.packets * 0.02)
    assert (stats.attempts, stats.retries, stats.resumes, stats.backoff_s) == (1, 0, 0, 0.0)
    assert stats.time_to_first_audio_s is not None and stats.time_to_first_audio_s >= 0
    assert stats.elapsed_s is not None and stats.elapsed_s >= stats.time_to_first_audio_s
    assert stats.echo_round_trip_ms is not None and stats.echo_round_trip_ms >= 0
    assert min(stats.server_delays_ms) >= 0  # one host, one clock
    assert stats.server_delay_p50_ms is not None and stats.server_delay_max_ms is not None
    assert stats.slot_wait_s >= 0
    first = server.synthesize_requests[0]
    assert first.client_ts_ms > 0
