"""Raw Opus packets for the real-time lane: one packet per 20 ms frame, mono, via libopus.

:class:`OpusStreamEncoder` turns float PCM arriving in pieces of any length into 20 ms Opus
packets; :class:`OpusStreamDecoder` turns packets back into PCM (used by tests and clients).
Packets carry no container; the Ogg writer for files lives in :mod:`voicelane.common.audio.files`.

Codec delay
-----------
libopus delays its output by its look-ahead: 6.5 ms (:data:`CODEC_DELAY_MS`) for the "audio"
and "voip" applications at every sample rate, i.e. 52 / 78 / 104 / 156 / 312 samples at
8 / 12 / 16 / 24 / 48 kHz (:func:`codec_delay_samples`, checked against
``OPUS_GET_LOOKAHEAD`` in the tests). The decoder's output for packet ``k`` therefore holds
input samples from ``k * 20 ms - 6.5 ms`` onwards; the first 6.5 ms decoded are warm-up.
This is the Ogg "pre-skip" (312 at 48 kHz). The stream encoder does not trim or compensate it:
a live stream simply starts 6.5 ms late, and presentation timestamps
(:attr:`OpusStreamEncoder.next_pts_ms`) count packets, not the delay.

Complexity
----------
:data:`DEFAULT_COMPLEXITY` is 6, not libopus's default 10, for both the packet encoder and the
Ogg writer. Complexity 7 and above switch on libopus's signal analysis (speech/music and
bandwidth decisions), which costs speed on one core at 24 kHz, 32 kbps: 170x vs 590x real time
on a pure tonal chirp, 408x vs 579x on the harmonic speech-like signal of ``bench/audio_codecs.py``.
The quality side of that trade was not measured by listening; pass ``complexity=10`` for
libopus's default.
"""

from __future__ import annotations

import ctypes
import logging
import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
import opuslib
import opuslib.api.encoder as opus_encoder_api

from voicelane.common.audio.pcm import PcmF32, as_pcm_f32
from voicelane.common.encode_failures import count_encode_failure
from voicelane.common.errors import InvalidInputError, UnsupportedFormatError

logger = logging.getLogger(__name__)

OPUS_SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 12000, 16000, 24000, 48000)
FRAME_DURATION_MS = 20
CODEC_DELAY_MS = 6.5
"""libopus look-ahead (the Ogg pre-skip) for the "audio" and "voip" applications."""
DEFAULT_COMPLEXITY = 6
MIN_BITRATE_BPS = 6000
MAX_BITRATE_BPS = 510000
# Largest Opus packet duration (120 ms); decode buffers are sized for it.
_MAX_PACKET_MS = 120

OpusApplication = Literal["audio", "voip"]


def check_opus_rate(sample_rate_hz: int) -> None:
    if sample_rate_hz not in OPUS_SAMPLE_RATES_HZ:
        allowed = ", ".join(str(r) for r in OPUS_SAMPLE_RATES_HZ)
        raise UnsupportedFormatError(
            f"Opus does not support a sample rate of {sample_rate_hz} Hz; use one of {allowed}"
        )


def codec_delay_samples(sample_rate_hz: int) -> int:
    """The codec delay (6.5 ms) in samples at ``sample_rate_hz``: 156 at 24 kHz, 312 at 48."""
    check_opus_rate(sample_rate_hz)
    return sample_rate_hz * 13 // 2000


def samples_per_frame(sample_rate_hz: int) -> int:
    """Samples in one 20 ms frame at ``sample_rate_hz`` (480 at 24 kHz)."""
    check_opus_rate(sample_rate_hz)
    return sample_rate_hz * FRAME_DURATION_MS // 1000


def _describe(exc: BaseException) -> str:
    """``exc`` as text; opuslib's messages come out as ``b'...'`` (C strings), unwrap those."""
    text = str(exc)
    if len(text) >= 3 and text[:2] in ("b'", 'b"') and text[-1] == text[1]:
        text = text[2:-1]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _sanitized(pcm: PcmF32) -> PcmF32:
    """NaN becomes 0 and +/-inf becomes +/-1 (libopus must never see non-finite input)."""
    if np.isfinite(pcm).all():
        return pcm
    return np.nan_to_num(pcm, nan=0.0, posinf=1.0, neginf=-1.0)


_MAX_PACKET_BYTES = 1500
"""libopus's recommended output buffer (a 20 ms packet at 510 kb/s is ~1,300 bytes)."""
_FLOAT_POINTER = ctypes.POINTER(ctypes.c_float)


class _Encoder:
    """An opuslib encoder state with a lean encode call: one output buffer per encoder and one
    copy of the packet (opuslib's ``encode_float`` allocates a buffer and copies the packet
    three times per frame — a tenth of a real-time worker's Python time at 200 streams)."""

    def __init__(
        self, sample_rate_hz: int, application: str, bitrate_bps: int, complexity: int
    ) -> None:
        self._state = opuslib.Encoder(sample_rate_hz, 1, application)
        self._state.bitrate = bitrate_bps
        self._state.complexity = complexity
        self._out = ctypes.create_string_buffer(_MAX_PACKET_BYTES)

    def encode_float(self, pcm: bytes, frame_size: int) -> bytes:
        size = opus_encoder_api.libopus_encode_float(
            self._state.encoder_state,
            ctypes.cast(ctypes.c_char_p(pcm), _FLOAT_POINTER),
            frame_size,
            self._out,
            _MAX_PACKET_BYTES,
        )
        if size < 0:
            raise opuslib.OpusError(size)
        return ctypes.string_at(self._out, size)

    def reset_state(self) -> None:
        self._state.reset_state()

    @property
    def lookahead(self) -> int:
        """libopus's look-ahead in samples (the codec delay)."""
        return int(self._state.lookahead)


def _new_encoder(
    sample_rate_hz: int, application: str, bitrate_bps: int, complexity: int
) -> _Encoder:
    return _Encoder(sample_rate_hz, application, bitrate_bps, complexity)


class OpusStreamEncoder:
    """Buffers mono float PCM and emits one Opus packet per complete 20 ms frame.

    Never raises on a codec failure and never leaves a gap: a frame that fails to encode is
    replaced by a 20 ms silence packet, logged (warning, with the frame index), and counted in
    :attr:`encode_failures` and :func:`encode_failures_total`. The number of packets always
    equals ``ceil(samples / samples_per_frame)`` once :meth:`flush` has run.

    Not thread-safe: one encoder per stream, used from one thread at a time.
    """

    def __init__(
        self,
        sample_rate_hz: int = 24000,
        bitrate_bps: int = 32000,
        application: OpusApplication = "audio",
        *,
        complexity: int = DEFAULT_COMPLEXITY,
    ) -> None:
        check_opus_rate(sample_rate_hz)
        if application not in ("audio", "voip"):
            raise InvalidInputError(
                f"Opus application must be 'audio' or 'voip', got {application!r}"
            )
        if not MIN_BITRATE_BPS <= bitrate_bps <= MAX_BITRATE_BPS:
            raise InvalidInputError(
                f"Opus bitrate must be {MIN_BITRATE_BPS}..{MAX_BITRATE_BPS} bps, got {bitrate_bps}"
            )
        if not 0 <= complexity <= 10:
            raise InvalidInputError(f"Opus complexity must be 0..10, got {complexity}")
        self.sample_rate_hz = sample_rate_hz
        self.bitrate_bps = bitrate_bps
        self.application: OpusApplication = application
        self.complexity = complexity
        self._frame = samples_per_frame(sample_rate_hz)
        # The live encoder. Tests replace its encode_float to inject failures.
        self._encoder = _new_encoder(sample_rate_hz, application, bitrate_bps, complexity)
        # 20 ms of silence from a separate encoder state, so the stand-in for a failed frame
        # never depends on the (possibly broken) live state.
        silent = np.zeros(self._frame, dtype=np.float32).tobytes()
        spare = _new_encoder(sample_rate_hz, application, bitrate_bps, complexity)
        self._silence_packet: bytes = bytes(spare.encode_float(silent, self._frame))
        self._pending: PcmF32 = np.zeros(0, dtype=np.float32)
        self._packets = 0
        self._failures = 0
        self._samples_in = 0

    @property
    def samples_per_frame(self) -> int:
        return self._frame

    @property
    def packets_emitted(self) -> int:
        return self._packets

    @property
    def next_pts_ms(self) -> int:
        """Presentation time of the next packet: ``packets_emitted * 20``."""
        return self._packets * FRAME_DURATION_MS

    @property
    def encode_failures(self) -> int:
        return self._failures

    @property
    def samples_in(self) -> int:
        """Samples accepted by :meth:`encode` so far (flush padding not included)."""
        return self._samples_in

    @property
    def pending_samples(self) -> int:
        """Samples buffered towards the next (incomplete) frame."""
        return len(self._pending)

    @property
    def codec_delay_samples(self) -> int:
        """libopus's look-ahead at this rate (see the module docstring)."""
        return codec_delay_samples(self.sample_rate_hz)

    @property
    def silence_packet(self) -> bytes:
        """The 20 ms silence packet that replaces a frame that failed to encode."""
        return self._silence_packet

    def encode(self, pcm: PcmF32) -> list[bytes]:
        """Buffer ``pcm`` (any length) and return one packet per complete 20 ms frame."""
        arr = _sanitized(as_pcm_f32(pcm))
        self._samples_in += len(arr)
        data = np.concatenate([self._pending, arr]) if len(self._pending) else arr
        n_frames = len(data) // self._frame
        cut = n_frames * self._frame
        self._pending = data[cut:].copy()
        return [self._encode_frame(data[i : i + self._frame]) for i in range(0, cut, self._frame)]

    def flush(self) -> list[bytes]:
        """Pad the buffered partial frame with silence and encode it; ``[]`` if none."""
        if not len(self._pending):
            return []
        frame = np.zeros(self._frame, dtype=np.float32)
        frame[: len(self._pending)] = self._pending
        self._pending = np.zeros(0, dtype=np.float32)
        return [self._encode_frame(frame)]

    def _encode_frame(self, frame: PcmF32) -> bytes:
        index = self._packets
        self._packets += 1
        try:
            packet = self._encoder.encode_float(frame.tobytes(), self._frame)
        except Exception as exc:  # any codec failure becomes silence, never a crash or a gap
            self._failures += 1
            count_encode_failure()
            logger.warning(
                "Opus frame %d failed to encode (%s); sent 20 ms of silence instead",
                index,
                _describe(exc),
            )
            try:
                self._encoder.reset_state()
            except Exception:  # best effort; the next frame may fail too
                logger.debug("Opus encoder reset failed after frame %d", index, exc_info=True)
            return self._silence_packet
        return packet


class OpusStreamDecoder:
    """Decodes raw Opus packets to mono float PCM at ``sample_rate_hz`` (any Opus rate).

    Opus packets are rate-independent: a 24 kHz stream decodes fine at 48 kHz. The output lags
    the encoder's input by :data:`CODEC_DELAY_MS` (see the module docstring); nothing is trimmed.
    """

    def __init__(self, sample_rate_hz: int = 48000) -> None:
        check_opus_rate(sample_rate_hz)
        self.sample_rate_hz = sample_rate_hz
        self._frame = samples_per_frame(sample_rate_hz)
        self._max_samples = sample_rate_hz * _MAX_PACKET_MS // 1000
        self._decoder = opuslib.Decoder(sample_rate_hz, 1)
        self._packets = 0
        self._samples = 0

    @property
    def packets_decoded(self) -> int:
        return self._packets

    @property
    def samples_decoded(self) -> int:
        return self._samples

    @property
    def codec_delay_samples(self) -> int:
        return codec_delay_samples(self.sample_rate_hz)

    def decode(self, packet: bytes) -> PcmF32:
        """One packet's audio (20 ms for voicelane's packets).

        An empty packet means "lost": 20 ms of packet-loss concealment is returned. A corrupt
        packet raises :class:`~voicelane.common.errors.InvalidInputError`.
        """
        try:
            if len(packet) == 0:
                raw = self._decoder.decode_float(b"", self._frame)
            else:
                raw = self._decoder.decode_float(bytes(packet), self._max_samples)
        except opuslib.OpusError as exc:
            raise InvalidInputError(
                f"corrupt Opus packet #{self._packets}: {_describe(exc)}"
            ) from exc
        pcm = np.frombuffer(raw, dtype=np.float32).copy()
        self._packets += 1
        self._samples += len(pcm)
        return pcm

    def decode_all(self, packets: Iterable[bytes]) -> PcmF32:
        """The concatenated audio of ``packets``, in order."""
        parts = [self.decode(p) for p in packets]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def packet_count(n_samples: int, sample_rate_hz: int) -> int:
    """Packets an encoder emits (after flush) for ``n_samples``: ``ceil(n / frame)``."""
    return math.ceil(n_samples / samples_per_frame(sample_rate_hz))
