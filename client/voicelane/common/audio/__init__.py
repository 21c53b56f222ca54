"""Audio for voicelane: PCM helpers, raw Opus packets, audio files.

- :mod:`voicelane.common.audio.pcm` — float/int16 conversion, resampling (whole and
  streaming), silence;
- :mod:`voicelane.common.audio.opus` — 20 ms Opus packets for the real-time lane (libopus via
  opuslib);
- :mod:`voicelane.common.audio.files` — Ogg/Opus, MP3, WAV, FLAC and M4B writers (and AAC
  in ADTS for streams) and a decoding probe (PyAV);
- :mod:`voicelane.common.audio.tempo` — time-stretching in pieces (libavfilter's ``atempo``).
"""

from voicelane.common.audio.files import (
    AudioFileWriter,
    AudioFormat,
    AudioInfo,
    decode_to_pcm,
    format_from_name,
    format_from_path,
    open_writer,
    probe,
    validate_sample_rate,
)
from voicelane.common.audio.opus import (
    CODEC_DELAY_MS,
    DEFAULT_COMPLEXITY,
    FRAME_DURATION_MS,
    OPUS_SAMPLE_RATES_HZ,
    OpusStreamDecoder,
    OpusStreamEncoder,
    codec_delay_samples,
)
from voicelane.common.audio.pcm import (
    SILENCE_THRESHOLD,
    PcmF32,
    PcmI16,
    StreamResampler,
    apply_gain_db,
    float_to_int16,
    int16_to_float,
    resample,
    resampled_length,
    silence,
    silence_edges,
)
from voicelane.common.encode_failures import encode_failures_total

__all__ = [
    "CODEC_DELAY_MS",
    "DEFAULT_COMPLEXITY",
    "FRAME_DURATION_MS",
    "OPUS_SAMPLE_RATES_HZ",
    "SILENCE_THRESHOLD",
    "AudioFileWriter",
    "AudioFormat",
    "AudioInfo",
    "OpusStreamDecoder",
    "OpusStreamEncoder",
    "PcmF32",
    "PcmI16",
    "StreamResampler",
    "apply_gain_db",
    "codec_delay_samples",
    "decode_to_pcm",
    "encode_failures_total",
    "float_to_int16",
    "format_from_name",
    "format_from_path",
    "int16_to_float",
    "open_writer",
    "probe",
    "resample",
    "resampled_length",
    "silence",
    "silence_edges",
    "validate_sample_rate",
]
