"""The SDK decoding audio and writing files (voicelane.client.audio, voicelane.client.sync), against
the fake Speech server (see helpers.py for the rules every test here follows)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.fake_speech_server import API_KEY, FakeSpeechServer
from tests.unit.client.helpers import FAST, TEXT, async_test, new_client, only_rendered, snr_db
from voicelane.client import say_to_file
from voicelane.client.audio import PcmAssembler
from voicelane.client.stats import StreamStats
from voicelane.common.audio import open_writer, probe
from voicelane.common.audio.opus import FRAME_DURATION_MS, codec_delay_samples
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2 as pb

# ---- decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("rate_hz", [16000, 24000, 48000])
@async_test
async def test_decoded_audio_is_exactly_what_the_server_encoded(rate_hz: int) -> None:
    # 12 frames minus the codec delay: the flush padding covers the delay exactly, so after
    # trimming the delay at the start nothing is missing and nothing is extra.
    frame = rate_hz * FRAME_DURATION_MS // 1000
    samples = 12 * frame - codec_delay_samples(rate_hz)
    async with FakeSpeechServer(fixed_samples=samples) as server, new_client(server.target) as c:
        result = await c.synthesize_pcm(TEXT, sample_rate_hz=rate_hz)
    encoded = only_rendered(server)
    assert result.sample_rate_hz == rate_hz
    assert len(result.pcm) == len(encoded.pcm) == samples
    assert result.duration_s == pytest.approx(samples / rate_hz)
    assert result.pcm.dtype == np.float32
    # Aligned sample for sample: the trim is right (one codec delay off would be noise).
    assert snr_db(result.pcm, encoded.pcm) > 20
    delay = codec_delay_samples(rate_hz)
    assert snr_db(result.pcm[delay:], encoded.pcm[:-delay]) < 6


@async_test
async def test_decoded_length_is_packets_minus_codec_delay_for_any_text_length() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        result = await client.synthesize_pcm(TEXT)
    encoded = only_rendered(server)
    frame, delay = 480, codec_delay_samples(24000)
    assert result.packets == encoded.packets == -(-len(encoded.pcm) // frame)
    assert len(result.pcm) == result.packets * frame - delay
    assert abs(len(result.pcm) - len(encoded.pcm)) < frame
    assert result.chunks == len(encoded.chunks)
    assert [c.text for c in result.captions] == [TEXT]


@async_test
async def test_a_pts_gap_is_concealed_so_audio_stays_on_the_timeline() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.lost_seqs = frozenset({3})  # 5 packets (100 ms) never arrive
        result = await client.synthesize_pcm(TEXT * 2)
    encoded = only_rendered(server)
    assert result.concealed_ms == 100
    assert result.packets == encoded.packets - 5
    assert len(result.pcm) == encoded.packets * 480 - codec_delay_samples(24000)
    after_gap = slice(len(result.pcm) - 4800, len(result.pcm) - 480)  # the audio goes on in step
    assert snr_db(result.pcm[after_gap], encoded.pcm[after_gap]) > 20


# ---- files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("extension", ["wav", "ogg", "flac"])
@async_test
async def test_synthesize_to_file_writes_the_decoded_audio(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"out.{extension}"
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        result = await client.synthesize_to_file(TEXT, path)
    info = probe(path)
    assert info.sample_rate_hz == 24000
    assert info.duration_s == pytest.approx(result.duration_s, abs=0.001)
    assert os.listdir(tmp_path) == [path.name]


@async_test
async def test_synthesize_to_file_leaves_no_partial_file_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "out.wav"
    path.write_bytes(b"previous")
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops, server.expire_outputs = 2, 1, True
        with pytest.raises(RemoteError):
            await client.synthesize_to_file(TEXT * 4, path)
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == [path.name]


@async_test
async def test_a_failing_encoder_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.ogg"

    def failing_open_writer(*args: Any, **kwargs: Any) -> Any:
        writer = open_writer(*args, **kwargs)

        def write(pcm: PcmF32) -> None:
            writer.__class__.write(writer, pcm[: len(pcm) // 2])  # half of it lands on disk
            raise OSError("disk full")

        writer.write = write  # type: ignore[method-assign]
        return writer

    monkeypatch.setattr("voicelane.client.audio.open_writer", failing_open_writer)
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        with pytest.raises(OSError, match="disk full"):
            await client.synthesize_to_file(TEXT, path)
    assert os.listdir(tmp_path) == []


@async_test
async def test_say_to_file_runs_the_client_in_its_own_loop(tmp_path: Path) -> None:
    path = tmp_path / "say.wav"
    async with FakeSpeechServer() as server:  # served by this loop while say_to_file runs
        result = await asyncio.to_thread(
            say_to_file, server.target, API_KEY, TEXT, path, sample_rate_hz=16000, retry=FAST
        )
    assert result.sample_rate_hz == 16000
    assert probe(path).duration_s == pytest.approx(result.duration_s, abs=0.001)


def test_the_result_keeps_the_streams_words_and_marks_in_order() -> None:
    word = pb.Word(text="$3.5M", char_start=7, char_end=12, start_ms=400, end_ms=2150)
    assembler = PcmAssembler(24000)
    assembler.add(pb.AudioChunk(seq=0, words=[pb.Word(text="I", end_ms=90), word]))
    assembler.add(pb.AudioChunk(seq=1, final=True, marks=[pb.MarkReached(name="m", time_ms=9)]))
    result = assembler.result(StreamStats())
    assert [w.text for w in result.words] == ["I", "$3.5M"]
    assert result.words_json()[1] == {
        "text": "$3.5M",
        "start_ms": 400,
        "end_ms": 2150,
        "char_start": 7,
        "char_end": 12,
    }
    assert result.marks_json() == [{"name": "m", "time_ms": 9}]
