"""The real-time lane's wire format (:mod:`voicelane.core.lane.messages`): every message reads
back as written, errors cross whole, and entries of the previous release still read."""

from __future__ import annotations

import pytest

from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    QuotaExceededError,
    UnavailableError,
    UnknownVoiceError,
    VoicelaneError,
    WireError,
    error_from_wire,
)
from voicelane.core.lane.messages import (
    NO_DETAIL,
    CapacityReport,
    EventKind,
    InputKind,
    InputPiece,
    Mode,
    OutputEvent,
    StreamRequest,
    pack_packets,
    unpack_packets,
)
from voicelane.core.word_timings import MarkTiming, WordTiming


def as_stored(fields: dict[str, bytes | str]) -> dict[bytes, bytes]:
    """Fields as redis-py hands an entry back: names and values as bytes."""
    return {
        name.encode(): value if isinstance(value, bytes) else value.encode()
        for name, value in fields.items()
    }


def round_trip(event: OutputEvent) -> OutputEvent:
    return OutputEvent.from_fields(as_stored(event.to_fields()))


EVENTS = [
    pytest.param(
        OutputEvent(
            EventKind.AUDIO,
            seq=7,
            data=(b"\xf8\xff\xfe", b"", b"\x00" * 300),
            pts_ms=140,
            sample_rate_hz=48000,
            server_ts_ms=1_700_000_000_123,
            client_ts_ms=42,
            sentence=3,
        ),
        id="audio",
    ),
    pytest.param(
        OutputEvent(
            EventKind.CAPTION, seq=4, pts_ms=80, sentence=1, text="你好，世界。", start=13, end=19
        ),
        id="caption",
    ),
    pytest.param(OutputEvent(EventKind.END, seq=9, pts_ms=1800, sentence=5), id="end"),
    pytest.param(
        OutputEvent(
            EventKind.AUDIO,
            seq=1,
            data=(b"\xf8\xff\xfe",),
            pts_ms=20,
            sentence=0,
            words=(
                WordTiming("$3.5M", 7, 912, 7, 12),
                WordTiming("你好", 950, 1210, 13, 15),
            ),
            marks=(MarkTiming("intro", 7),),
        ),
        id="audio-words-marks",
    ),
    pytest.param(
        OutputEvent(
            EventKind.END,
            seq=9,
            pts_ms=1800,
            details='{"warnings": []}',
            marks=(MarkTiming("after-the-last-word", 1790), MarkTiming("é", 1790)),
        ),
        id="end-trailing-marks",
    ),
    pytest.param(
        OutputEvent(
            EventKind.ERROR,
            seq=2,
            error=WireError(
                code="quota_exceeded",
                message="tenant 'acme' already has 2 open streams",
                status="RESOURCE_EXHAUSTED",
                field="request_id",
                retry_after_s=2.5,
            ),
        ),
        id="error-every-field",
    ),
    pytest.param(
        OutputEvent(
            EventKind.ERROR,
            error=WireError(code="unavailable", message="the worker stopped", status="UNAVAILABLE"),
        ),
        id="error-no-field-no-hint",
    ),
]


@pytest.mark.parametrize("event", EVENTS)
def test_an_output_event_reads_back_as_written(event: OutputEvent) -> None:
    assert round_trip(event) == event


def test_an_audio_entry_of_the_previous_release_reads_with_no_words_or_marks() -> None:
    old = {
        b"kind": b"audio",
        b"seq": b"3",
        b"data": pack_packets([b"\xf8\xff\xfe"]),
        b"pts_ms": b"60",
        b"sample_rate_hz": b"24000",
        b"server_ts_ms": b"1",
        b"client_ts_ms": b"2",
        b"sentence": b"0",
    }
    event = OutputEvent.from_fields(old)
    assert event.seq == 3 and event.data == (b"\xf8\xff\xfe",) and event.pts_ms == 60
    assert event.words == () and event.marks == ()
    caption = OutputEvent.from_fields({b"kind": b"caption", b"seq": b"0", b"text": b"Hi."})
    assert caption.text == "Hi." and caption.words == () and caption.marks == ()


def test_words_and_marks_are_written_only_when_there_are_some() -> None:
    assert "words" not in OutputEvent(EventKind.AUDIO).to_fields()
    assert "marks" not in OutputEvent(EventKind.END).to_fields()
    fields = OutputEvent(EventKind.AUDIO, words=(WordTiming("a", 0, 5, 0, 1),)).to_fields()
    assert fields["words"] == (
        '[{"text": "a", "start_ms": 0, "end_ms": 5, "char_start": 0, "char_end": 1}]'
    )


def test_an_error_event_carries_the_typed_error_whole() -> None:
    raised = UnknownVoiceError("voice 'ghost' is unknown to the espeak engine", field="voice")
    event = round_trip(OutputEvent.failure(raised))

    assert event.kind is EventKind.ERROR and event.error == raised.to_wire()
    rebuilt = error_from_wire(event.error)
    assert type(rebuilt) is UnknownVoiceError
    assert rebuilt.field == "voice" and rebuilt.message == raised.message
    assert rebuilt.code == "unknown_voice" and rebuilt.grpc_status == "INVALID_ARGUMENT"


def test_a_retry_hint_crosses_the_lane() -> None:
    raised = QuotaExceededError("over the quota", retry_after_s=0.125)
    rebuilt = error_from_wire(round_trip(OutputEvent.failure(raised)).error or NO_DETAIL)
    assert type(rebuilt) is QuotaExceededError and rebuilt.retry_after_s == 0.125


def test_an_error_entry_keeps_the_fields_the_previous_release_reads() -> None:
    """A front of the previous release reads ``code`` (the status) and ``text`` (the message)."""
    fields = OutputEvent.failure(InvalidInputError("speed: too fast", field="speed")).to_fields()
    assert fields["code"] == "INVALID_ARGUMENT" and fields["text"] == "speed: too fast"
    assert fields["error_code"] == "invalid_input" and fields["field"] == "speed"
    assert "retry_after_s" not in fields


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        ("UNAVAILABLE", UnavailableError),
        ("DEADLINE_EXCEEDED", DeadlineExceededError),
        ("INVALID_ARGUMENT", InvalidInputError),
        ("INTERNAL", VoicelaneError),
    ],
)
def test_an_error_entry_of_the_previous_release_reads_by_its_status(
    status: str, cls: type[VoicelaneError]
) -> None:
    """A worker of the previous release wrote only the status and the message: a rolling
    upgrade falls back on the status."""
    old = {b"kind": b"error", b"seq": b"0", b"code": status.encode(), b"text": b"why"}
    event = OutputEvent.from_fields(old)

    assert event.error == WireError(code="", message="why", status=status)
    rebuilt = error_from_wire(event.error)
    assert type(rebuilt) is cls and rebuilt.message == "why"
    assert rebuilt.field is None and rebuilt.retry_after_s is None


def test_an_error_entry_without_any_status_is_internal() -> None:
    event = OutputEvent.from_fields({b"kind": b"error"})
    assert event.error is not None and event.error.status == "INTERNAL"
    assert type(error_from_wire(event.error)) is VoicelaneError


def test_an_error_event_made_without_an_error_says_the_worker_failed() -> None:
    assert round_trip(OutputEvent(EventKind.ERROR)).error == NO_DETAIL


def test_packets_pack_and_unpack() -> None:
    packets = (b"a", b"", b"\x00\xff" * 500)
    assert unpack_packets(pack_packets(packets)) == packets
    assert unpack_packets(b"") == ()


def test_a_stream_request_reads_back_as_written() -> None:
    request = StreamRequest(
        request_id="acme.r-1",
        tenant="acme",
        voice="en-us",
        sample_rate_hz=16000,
        deadline_ms=1_700_000_030_000,
        mode=Mode.CONVERSE,
        speed=1.25,
        client_ts_ms=77,
        encoding=StreamEncoding.MP3,
        paced=False,
        submitted_ms=1_700_000_000_000,
    )
    assert StreamRequest.from_fields(as_stored(dict(request.to_fields()))) == request


def test_a_stream_requests_tempo_reads_back_and_is_1_when_absent() -> None:
    stretched = StreamRequest(
        "acme.r", "acme", "auto", 24000, 5, speed=2.5, tempo=1.6, encoding=StreamEncoding.AAC
    )
    fields = as_stored(dict(stretched.to_fields()))
    assert fields[b"tempo"] == b"1.6"
    back = StreamRequest.from_fields(fields)
    assert (back.tempo, back.speed, back.encoding) == (1.6, 2.5, StreamEncoding.AAC)
    # An entry of the previous release has no tempo: nothing is stretched.
    del fields[b"tempo"]
    assert StreamRequest.from_fields(fields).tempo == 1.0


def test_a_stream_request_of_few_fields_reads_with_the_defaults() -> None:
    minimal = StreamRequest("acme.r", "acme", "auto", 24000, 5, submitted_ms=0)
    stored = {
        name: value
        for name, value in as_stored(dict(minimal.to_fields())).items()
        if name in (b"request_id", b"tenant", b"voice", b"sample_rate_hz", b"deadline_ms")
    }
    assert StreamRequest.from_fields(stored) == minimal


@pytest.mark.parametrize(
    "piece",
    [
        InputPiece(InputKind.TEXT, "Hello there. "),
        InputPiece(InputKind.FLUSH),
        InputPiece(InputKind.END),
    ],
)
def test_an_input_piece_reads_back_as_written(piece: InputPiece) -> None:
    assert InputPiece.from_fields(as_stored(dict(piece.to_fields()))) == piece


def test_a_capacity_report_reads_back_as_written() -> None:
    report = CapacityReport(5, ts=1_700_000_000.25)
    assert CapacityReport.from_json(report.to_json()) == report
