"""voicelane.common.audio.stream: the byte-stream encodings a live stream can be delivered in."""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.common.audio.files import (
    AAC_SAMPLE_RATES_HZ,
    ADTS_MAX_EXTRA_SAMPLES,
    ADTS_PRIMING_SAMPLES,
    MP3_MAX_EXTRA_SAMPLES,
    AudioFormat,
    decode_to_pcm,
    probe,
)
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.audio.stream import (
    ByteStreamEncoder,
    StreamEncoding,
    stream_sample_rates,
    wav_stream_header,
)

RATE_HZ = 24000


def _tone(n: int) -> PcmF32:
    t = np.arange(n) / RATE_HZ
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _encode(encoding: StreamEncoding, pieces: list[PcmF32]) -> tuple[bytes, list[bytes]]:
    encoder = ByteStreamEncoder(encoding, RATE_HZ)
    parts = [encoder.encode(p) for p in pieces] + [encoder.close()]
    assert encoder.samples_in == sum(len(p) for p in pieces)
    return b"".join(parts), parts


PIECES = [_tone(960), _tone(4800), _tone(17), _tone(24000)]
SAMPLES = sum(len(p) for p in PIECES)


@pytest.mark.parametrize(
    "encoding",
    [
        StreamEncoding.OGG,
        StreamEncoding.MP3,
        StreamEncoding.WAV,
        StreamEncoding.FLAC,
        StreamEncoding.AAC,
    ],
)
def test_the_pieces_together_are_one_file_of_every_sample(encoding: StreamEncoding) -> None:
    data, parts = _encode(encoding, PIECES)
    assert sum(1 for p in parts if p) >= 2  # bytes come out while encoding, not only at close
    pcm, rate = decode_to_pcm(data, RATE_HZ)
    assert rate == RATE_HZ
    if encoding is StreamEncoding.MP3:  # a stream has no gapless header: delay and padding stay
        assert SAMPLES <= len(pcm) <= SAMPLES + 1105 + 576 + MP3_MAX_EXTRA_SAMPLES
    elif encoding is StreamEncoding.AAC:  # ADTS has no edit list: the priming stays
        assert SAMPLES + ADTS_PRIMING_SAMPLES <= len(pcm) <= SAMPLES + ADTS_MAX_EXTRA_SAMPLES
    else:
        assert len(pcm) == SAMPLES
    assert probe(data).sample_rate_hz == RATE_HZ


def test_wav_starts_with_a_header_of_unknown_length_then_raw_samples() -> None:
    data, parts = _encode(StreamEncoding.WAV, PIECES)
    header = wav_stream_header(RATE_HZ)
    assert parts[0].startswith(header) and len(data) == len(header) + 2 * SAMPLES


def test_pcm_is_raw_little_endian_16_bit() -> None:
    data, _ = _encode(StreamEncoding.PCM, [np.array([0.0, 0.5, -1.0], dtype=np.float32)])
    assert np.frombuffer(data, dtype="<i2").tolist() == [0, round(0.5 * 32767), -32767]


def test_opus_packets_are_not_a_byte_stream() -> None:
    assert StreamEncoding.OPUS.packets and not StreamEncoding.OGG.packets
    with pytest.raises(ValueError):
        ByteStreamEncoder(StreamEncoding.OPUS, RATE_HZ)


def test_sample_rates_per_encoding() -> None:
    assert tuple(stream_sample_rates(StreamEncoding.OPUS)) == (8000, 12000, 16000, 24000, 48000)
    assert stream_sample_rates(StreamEncoding.OGG) == stream_sample_rates(StreamEncoding.OPUS)
    assert 22050 in stream_sample_rates(StreamEncoding.MP3)
    assert 22050 in stream_sample_rates(StreamEncoding.PCM)
    assert 96000 not in stream_sample_rates(StreamEncoding.MP3)
    assert {e.media_type for e in StreamEncoding} >= {"audio/ogg", "audio/mpeg", "audio/pcm"}


def test_no_live_stream_offers_m4b() -> None:
    # m4b is a file format for jobs and renders: MP4 cannot be written as a byte stream.
    assert AudioFormat.M4B.value not in {e.value for e in StreamEncoding}
    with pytest.raises(ValueError, match="'m4b' is not a valid StreamEncoding"):
        StreamEncoding("m4b")


def test_aac_is_adts_and_each_frame_goes_out_as_soon_as_it_is_encoded() -> None:
    # 20 ms pieces, as the worker's slices come: after every piece, what came out so far is a
    # stream of whole ADTS frames (it decodes) lagging the input by no more than the writer's
    # block (128 ms at 24 kHz) and the encoder's two frames: nothing waits for the end.
    encoder = ByteStreamEncoder(StreamEncoding.AAC, RATE_HZ)
    tone, step = _tone(2 * RATE_HZ), RATE_HZ // 50
    sent = b""
    pieces_out = 0
    for start in range(0, len(tone), step):
        piece = encoder.encode(tone[start : start + step])
        if piece:
            assert piece[0] == 0xFF and piece[1] & 0xF6 == 0xF0  # an ADTS sync word, layer 0
            pieces_out += 1
            sent += piece
        decoded = len(decode_to_pcm(sent)[0]) - ADTS_PRIMING_SAMPLES if sent else 0
        assert encoder.samples_in - decoded <= 3072 + 2 * 1024
    assert pieces_out >= 10
    rest = encoder.close()
    assert probe(sent + rest).codec == "aac" and probe(sent + rest).format_name == "aac"
    assert StreamEncoding.AAC.media_type == "audio/aac"


def test_aac_takes_the_aac_sample_rates() -> None:
    assert tuple(stream_sample_rates(StreamEncoding.AAC)) == AAC_SAMPLE_RATES_HZ
    assert 24000 in stream_sample_rates(StreamEncoding.AAC)
    assert 7350 not in stream_sample_rates(StreamEncoding.AAC)
    for rate in (8000, 44100):
        encoder = ByteStreamEncoder(StreamEncoding.AAC, rate)
        data = encoder.encode(np.zeros(rate, dtype=np.float32)) + encoder.close()
        assert probe(data).sample_rate_hz == rate
