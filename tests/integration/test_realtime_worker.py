"""The worker's real-time consumer on a real redis-server: sessions, sentences, Opus output,
cancel, deadlines, takeover of a dead worker's request, and the request stream's trimming."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import redis

from tests.support.engines import RecordingEngine
from tests.support.stack import wait_for
from voicelane.common.audio import OpusStreamDecoder
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.keys import (
    GROUP,
    cancel_key,
    heartbeat_key,
    output_key,
    owner_key,
    read_key,
    requests_key,
)
from voicelane.core.lane.messages import (
    EventKind,
    InputKind,
    InputPiece,
    Mode,
    OutputEvent,
    StreamRequest,
    new_request_id,
    now_ms,
)
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.settings import RealtimeSettings
from voicelane.core.speech_text import PreparedText, TextOptions, prepare_text
from voicelane.core.word_timings import WordTiming
from voicelane.workers import realtime
from voicelane.workers.batching import Batcher
from voicelane.workers.engines import PcmF32, Utterance
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.realtime import RealtimeConsumer, SentenceCutter

ESPEAK_REQUESTS = requests_key("espeak")

pytestmark = pytest.mark.integration

SETTINGS = RealtimeSettings(
    lookahead_s=1000, heartbeat_ttl_s=1.0, reclaim_idle_s=1.0, worker_ttl_s=2.0
)
TEXT = "Hello there. This is a streamed paragraph. 你好，世界。Goodbye now."


def request(
    mode: Mode = Mode.SYNTHESIZE, deadline_s: float = 30.0, *, paced: bool = True, **kw: object
) -> StreamRequest:
    return StreamRequest(
        request_id=new_request_id(),
        tenant="acme",
        voice=str(kw.get("voice", "auto")),
        sample_rate_hz=int(kw.get("rate", 24000)),  # type: ignore[call-overload]
        deadline_ms=now_ms() + int(deadline_s * 1000),
        mode=mode,
        client_ts_ms=12345,
        paced=paced,
    )


def submit(url: str, req: StreamRequest, text: str | None = TEXT) -> None:
    async def go() -> None:
        client = RealtimeClient.from_url(url)
        await client.submit(req, text)
        await client.close()

    asyncio.run(go())


def events(url: str, request_id: str, timeout_s: float = 30.0) -> list[OutputEvent]:
    """Everything written to the request's output stream, once it ended."""
    client = redis.Redis.from_url(url)

    def ended() -> list[OutputEvent] | None:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(output_key(request_id))  # type: ignore[assignment]
        got = [OutputEvent.from_fields(f) for _, f in entries]
        return got if got and got[-1].kind in (EventKind.END, EventKind.ERROR) else None

    try:
        return wait_for(ended, timeout_s, "the stream to end")
    finally:
        client.close()


@pytest.fixture
def espeak_consumer(redis_url: str) -> Iterator[RealtimeConsumer]:
    batcher = Batcher(EspeakEngine()).start()
    lane = RealtimeWorkerClient.from_url(redis_url, "w1@test", SETTINGS)
    consumer = RealtimeConsumer(batcher, lane, SETTINGS).start()
    yield consumer
    consumer.close()
    batcher.close()


def audio_of(got: Sequence[OutputEvent]) -> list[OutputEvent]:
    return [e for e in got if e.kind is EventKind.AUDIO]


def test_sentence_cutter_waits_for_complete_sentences() -> None:
    text = "Hello there. How are you? Fine."
    cutter = SentenceCutter()
    assert cutter.feed("Hello th") == []
    assert [s.text for s, _ in cutter.feed("ere. How")] == ["Hello there."]
    assert [s.text for s, _ in cutter.feed(" are you? Fi")] == ["How are you?"]
    assert cutter.feed("ne.") == []  # the last sentence may still grow
    ((last, base),) = cutter.flush()
    assert last.text == "Fine." and text[base + last.start : base + last.end] == "Fine."
    assert cutter.flush() == []


def test_a_stream_arrives_in_order_and_decodes_to_the_texts_audio(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    req = request()
    submit(redis_url, req)
    got = events(redis_url, req.request_id)
    audio = audio_of(got)
    assert [e.seq for e in audio] == list(range(len(audio)))
    assert len(audio[0].data) == 1  # the first packet goes out alone
    assert got[-1].kind is EventKind.END and got[-1].seq == len(audio)
    assert all(e.client_ts_ms == 12345 and e.sample_rate_hz == 24000 for e in audio)
    # pts are contiguous: each chunk starts where the previous one ended.
    for before, after in itertools.pairwise(audio):
        assert after.pts_ms == before.pts_ms + 20 * len(before.data)
    captions = [e for e in got if e.kind is EventKind.CAPTION]
    assert [c.text for c in captions] == [
        "Hello there.",
        "This is a streamed paragraph.",
        "你好，世界。",
        "Goodbye now.",
    ]
    assert [TEXT[c.start : c.end] for c in captions] == [c.text for c in captions]
    pcm = OpusStreamDecoder(24000).decode_all([p for e in audio for p in e.data])
    # The same sentences rendered directly by the engine, at 24 kHz.
    engine = EspeakEngine()
    direct_s = sum(
        len(engine.synthesize([Utterance(c.text, "auto")])[0]) / engine.sample_rate_hz
        for c in captions
    )
    assert len(pcm) / 24000 == pytest.approx(direct_s, rel=0.05)
    assert float(np.sqrt(np.mean(pcm**2))) > 0.01


def test_converse_speaks_sentences_as_the_text_arrives(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    req = request(Mode.CONVERSE)

    async def go() -> list[OutputEvent]:
        client = RealtimeClient.from_url(redis_url)
        await client.submit(req)
        await client.send_input(req.request_id, InputPiece(InputKind.TEXT, "First sentence. Sec"))
        first: list[OutputEvent] = []
        after = "0"
        while not any(e.kind is EventKind.AUDIO for e in first):  # before the rest is sent
            found, _ = await client.read_outputs({req.request_id: after}, 1000)
            for entry_id, event in found.get(req.request_id, []):
                after = entry_id
                first.append(event)
        await client.send_input(req.request_id, InputPiece(InputKind.TEXT, "ond one"))
        await client.send_input(req.request_id, InputPiece(InputKind.FLUSH))
        await client.send_input(req.request_id, InputPiece(InputKind.END))
        await client.close()
        return first

    first = asyncio.run(go())
    assert first[0].kind is EventKind.CAPTION and first[0].text == "First sentence."
    got = events(redis_url, req.request_id)
    captions = [e.text for e in got if e.kind is EventKind.CAPTION]
    assert captions == ["First sentence.", "Second one"]
    audio = audio_of(got)
    assert [e.seq for e in audio] == list(range(len(audio)))


def test_unknown_voice_is_an_invalid_argument_event(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    req = request(voice="klingon")
    submit(redis_url, req)
    (error,) = events(redis_url, req.request_id)
    assert error.kind is EventKind.ERROR and error.error is not None
    assert error.error.status == "INVALID_ARGUMENT"
    assert error.error.code == "unknown_voice" and error.error.field == "voice"  # whole
    assert "klingon" in error.error.message


def test_an_expired_request_never_reaches_a_batch(redis_url: str) -> None:
    engine = RecordingEngine(voices=("auto",))
    batcher = Batcher(engine).start()
    consumer = RealtimeConsumer(
        batcher, RealtimeWorkerClient.from_url(redis_url, "w@test", SETTINGS), SETTINGS
    ).start()
    try:
        req = request(deadline_s=-1)
        submit(redis_url, req)
        (error,) = events(redis_url, req.request_id)
        assert error.error is not None and error.error.status == "DEADLINE_EXCEEDED"
        assert engine.batches == []
    finally:
        consumer.close()
        batcher.close()


def test_cancel_mark_stops_the_engine_within_one_step(redis_url: str) -> None:
    engine = RecordingEngine(voices=("auto",), stream_chunks=400)
    engine.gate_from_step = 1
    engine.hold()  # step 0 runs, then the engine waits at the gate
    batcher = Batcher(engine).start()
    consumer = RealtimeConsumer(
        batcher, RealtimeWorkerClient.from_url(redis_url, "w@test", SETTINGS), SETTINGS
    ).start()
    try:
        req = request()
        submit(redis_url, req, "A long sentence that streams in many small steps." * 20)
        assert engine.entered.wait(10)
        redis.Redis.from_url(redis_url).set(cancel_key(req.request_id), "1")
        wait_for(lambda: consumer.free_slots == SETTINGS.slots_per_worker, 10, "session end")
        engine.release()
        assert engine.stream_closed.wait(10)
        assert engine.steps_run <= 2  # of 400
    finally:
        engine.release()
        consumer.close()
        batcher.close()


def test_a_dead_workers_request_is_taken_over_without_duplicate_seq(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    espeak_consumer.close()  # start with no live consumer
    dead = RealtimeWorkerClient.from_url(redis_url, "dead@test", SETTINGS)
    dead.ensure_group()
    req = request()
    submit(redis_url, req)
    ((entry_id, claimed),) = dead.claim_new(1, 1000)
    assert claimed.request_id == req.request_id
    # The dead worker had sent sentence 0's caption and two audio chunks, then died.
    packet = b"\xf8\xff\xfe"  # a valid 20 ms Opus packet (silence)
    sent = [
        OutputEvent(EventKind.CAPTION, seq=0, text="Hello there.", sentence=0),
        *(
            OutputEvent(EventKind.AUDIO, seq=seq, data=(packet,), pts_ms=20 * seq, sentence=0)
            for seq in range(2)
        ),
    ]
    began = dead.batch()
    began.begin_session(req.request_id)
    began.append_output(req.request_id, *sent)
    assert began.execute_or_raise()[1] is True
    batcher = Batcher(EspeakEngine()).start()
    survivor = RealtimeConsumer(
        batcher, RealtimeWorkerClient.from_url(redis_url, "w2@test", SETTINGS), SETTINGS
    ).start()
    try:
        got = events(redis_url, req.request_id, timeout_s=30)
        audio = audio_of(got)
        assert [e.seq for e in audio] == list(range(len(audio)))  # no duplicate, no hole
        captions = [e.text for e in got if e.kind is EventKind.CAPTION]
        assert captions[0] == "Hello there." and "Hello there." not in captions[1:]  # a gap
        assert got[-1].kind is EventKind.END
        assert audio[2].pts_ms == 40  # continues the timeline
        # The "dead" worker wakes up: it can no longer write.
        late = dead.batch()
        late.append_output(req.request_id, OutputEvent(EventKind.AUDIO, seq=99))
        assert late.execute_or_raise() == [False]
        assert entry_id  # acknowledged by the survivor:
        wait_for(
            lambda: (
                redis.Redis.from_url(redis_url).xpending(ESPEAK_REQUESTS, GROUP)["pending"] == 0
            ),
            10,
            "the request to be acknowledged",
        )
    finally:
        survivor.close()
        batcher.close()


def test_a_request_that_ended_before_its_takeover_is_not_taken(redis_url: str) -> None:
    """The previous owner wrote the end but had not acknowledged the entry when another
    worker reclaimed it (slow, or its heartbeats lapsed): the late worker takes nothing — the
    owner key still names the worker that wrote the stream (CI saw it name the other host)."""
    first = RealtimeWorkerClient.from_url(redis_url, "first@test", SETTINGS)
    late = RealtimeWorkerClient.from_url(redis_url, "late@test", SETTINGS)
    first.ensure_group()
    req = request()
    submit(redis_url, req)
    ((_, claimed),) = first.claim_new(1, 1000)
    rid = claimed.request_id
    served = first.batch()
    served.begin_session(rid)
    served.append_output(rid, OutputEvent(EventKind.END, seq=0))
    pieces, appended = served.execute_or_raise()
    assert pieces and appended is True
    taken = late.batch()
    taken.begin_session(rid)
    assert taken.execute_or_raise() == [None]
    client = redis.Redis.from_url(redis_url)
    assert client.get(owner_key(rid)) == b"first@test"
    assert client.get(heartbeat_key(rid)) == b"first@test"
    # A request still in progress (no end yet) is taken: that is the takeover.
    req2 = request()
    submit(redis_url, req2)
    ((_, claimed2),) = first.claim_new(1, 1000)
    again = late.batch()
    again.begin_session(claimed2.request_id)
    (pieces2,) = again.execute_or_raise()
    assert pieces2 is not None
    assert client.get(owner_key(claimed2.request_id)) == b"late@test"


def finish(lane: RealtimeWorkerClient, entry_id: str, request_id: str) -> None:
    """What a worker does when a request is done: ack it (in a round), then trim."""
    batch = lane.batch()
    batch.finish(entry_id, request_id)
    batch.execute_or_raise()
    lane.trim()


def test_trimming_keeps_pending_requests(redis_url: str) -> None:
    lane = RealtimeWorkerClient.from_url(redis_url, "w@test", SETTINGS)
    lane.ensure_group()
    reqs = [request() for _ in range(3)]
    for req in reqs:
        submit(redis_url, req)
    claimed = lane.claim_new(3, 1000)
    finish(lane, claimed[0][0], claimed[0][1].request_id)
    client = redis.Redis.from_url(redis_url)
    remaining = [e[0].decode() for e in client.xrange(ESPEAK_REQUESTS)]  # type: ignore[union-attr]
    assert remaining == [claimed[1][0], claimed[2][0]]  # done one trimmed, pending kept
    finish(lane, claimed[2][0], claimed[2][1].request_id)
    remaining = [e[0].decode() for e in client.xrange(ESPEAK_REQUESTS)]  # type: ignore[union-attr]
    assert remaining == [claimed[1][0], claimed[2][0]]  # never past the oldest pending
    finish(lane, claimed[1][0], claimed[1][1].request_id)
    assert client.xlen(ESPEAK_REQUESTS) == 0


def test_capacity_is_reported_and_expires(redis_url: str) -> None:
    lane = RealtimeWorkerClient.from_url(redis_url, "w@test", SETTINGS)
    lane.report_capacity(5)

    async def capacity() -> int:
        client = RealtimeClient.from_url(redis_url, SETTINGS)
        try:
            return await client.capacity("espeak")
        finally:
            await client.close()

    assert asyncio.run(capacity()) == 5
    lane.withdraw()
    assert asyncio.run(capacity()) == 0


LONG_TEXT = " ".join(
    f"Sentence number {n} is here so that the stream lasts a good while." for n in range(4)
)


def span_s(got: Sequence[OutputEvent]) -> tuple[float, float]:
    """(wall seconds between the first and last audio entry, audio seconds)."""
    audio = audio_of(got)
    wall_s = (audio[-1].server_ts_ms - audio[0].server_ts_ms) / 1000
    audio_s = (audio[-1].pts_ms + 20 * len(audio[-1].data)) / 1000
    return wall_s, audio_s


def test_a_live_stream_is_paced_and_a_file_style_one_is_not(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    live, file_style = request(), request(paced=False)
    submit(redis_url, live, LONG_TEXT)
    submit(redis_url, file_style, LONG_TEXT)
    live_wall_s, live_audio_s = span_s(events(redis_url, live.request_id))
    file_wall_s, file_audio_s = span_s(events(redis_url, file_style.request_id))
    assert live_audio_s == pytest.approx(file_audio_s, abs=0.05) and live_audio_s > 8
    # Live: encoded at most encode_ahead_s ahead of playback, so it lasts about as long as
    # its audio (a lower bound: pacing sleeps).
    assert live_wall_s >= live_audio_s - SETTINGS.encode_ahead_s - 0.5
    # File-style: nothing waits for playback (espeak renders ~1000x real time).
    assert file_wall_s < live_audio_s / 2


def test_a_stream_whose_client_does_not_read_waits_and_the_others_go_on(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    """Backpressure (issue 26, item 1): a file-style stream submitted with a read mark is
    rendered at most ``max_unread_output_s`` beyond what its client took, however long its
    text; another stream of the same worker (here one without a read mark, as a front of the
    previous release submits it: no backpressure) renders whole meanwhile; once the client
    reads, the waiting stream goes on to its end, whole."""
    window_ms = SETTINGS.max_unread_output_s * 1000
    waiting, other = request(paced=False), request(paced=False)

    async def go() -> None:
        client = RealtimeClient.from_url(redis_url)
        await client.submit(waiting, LONG_TEXT, backpressure=True)
        await client.submit(other, LONG_TEXT)
        await client.close()

    asyncio.run(go())
    other_got = events(redis_url, other.request_id)
    assert other_got[-1].kind is EventKind.END
    whole_ms = other_got[-1].pts_ms
    assert whole_ms > 2 * window_ms  # the text is longer than the window
    client = redis.Redis.from_url(redis_url)

    def output(rid: str) -> list[OutputEvent]:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(output_key(rid))  # type: ignore[assignment]
        return [OutputEvent.from_fields(f) for _, f in entries]

    try:
        # Nobody read: the waiting stream stopped at the window (its last entry starts within
        # it), never reaching its end, while the other stream rendered all of its audio.
        got = wait_for(
            lambda: audio_of(output(waiting.request_id)), 10, "the waiting stream's first audio"
        )
        got = output(waiting.request_id)
        assert got[-1].kind is EventKind.AUDIO
        assert audio_of(got)[-1].pts_ms <= window_ms

        def read_along() -> list[OutputEvent] | None:
            """A client taking everything written so far (the front's read mark)."""
            got = output(waiting.request_id)
            if audio_of(got):
                client.set(read_key(waiting.request_id), audio_of(got)[-1].pts_ms)
            return got if got[-1].kind in (EventKind.END, EventKind.ERROR) else None

        got = wait_for(read_along, 30, "the waiting stream to end once read")
    finally:
        client.close()
    assert got[-1].kind is EventKind.END and got[-1].pts_ms == pytest.approx(whole_ms, abs=50)
    audio = audio_of(got)
    assert [e.seq for e in audio] == list(range(len(audio)))


def test_sessions_do_not_cost_a_thread_each(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    """Open conversations waiting for their text hold no thread: 28 open sessions, the same
    threads as none, and all of them are served once their text comes."""
    before = threading.active_count()
    reqs = [request(Mode.CONVERSE) for _ in range(SETTINGS.slots_per_worker - 4)]

    async def go() -> None:
        client = RealtimeClient.from_url(redis_url)
        for req in reqs:
            await client.submit(req)
        wait_s = 0.0
        while espeak_consumer.free_slots > SETTINGS.slots_per_worker - len(reqs) and wait_s < 20:
            await asyncio.sleep(0.05)
            wait_s += 0.05
        assert espeak_consumer.free_slots == SETTINGS.slots_per_worker - len(reqs)
        assert threading.active_count() == before
        for req in reqs:
            await client.send_input(req.request_id, InputPiece(InputKind.TEXT, "Hi there."))
            await client.send_input(req.request_id, InputPiece(InputKind.END))
        await client.close()

    asyncio.run(go())
    for req in reqs:
        got = events(redis_url, req.request_id)
        assert got[-1].kind is EventKind.END and audio_of(got)


# ---- words, SSML breaks, voicing and marks ---------------------------------------------------

WORDS_TEXT = "I paid $3.5M on Monday. Then we left for home."
QUIET = 10 ** (-45 / 20)
FRAME_MS = 5


def decoded(got: Sequence[OutputEvent], rate_hz: int = 24000) -> PcmF32:
    """The stream's audio as a client hears it (Opus decoded, codec delay trimmed)."""
    decoder = OpusStreamDecoder(rate_hz)
    pcm: PcmF32 = decoder.decode_all([p for e in audio_of(got) for p in e.data])
    return pcm[decoder.codec_delay_samples :]


def loud_frames(pcm: PcmF32, rate_hz: int = 24000) -> npt.NDArray[np.bool_]:
    """Per 5 ms frame: does it hold sound (a peak at or above -45 dBFS)?"""
    frame = rate_hz * FRAME_MS // 1000
    count = len(pcm) // frame
    loud: npt.NDArray[np.bool_] = np.abs(pcm[: count * frame]).reshape(count, frame).max(1) >= QUIET
    return loud


def onset_ms(pcm: PcmF32, from_ms: float) -> int:
    """The first sound at or after ``from_ms``."""
    loud = loud_frames(pcm)
    first = int(max(0.0, from_ms) // FRAME_MS)
    return (first + int(np.flatnonzero(loud[first:])[0])) * FRAME_MS


def quiet_runs_ms(pcm: PcmF32) -> list[int]:
    """Lengths of the silences between sounds, longest first."""
    sound = np.flatnonzero(loud_frames(pcm))
    gaps = np.diff(sound) - 1
    return sorted((int(g) * FRAME_MS for g in gaps if g > 0), reverse=True)


def words_of(got: Sequence[OutputEvent]) -> list[WordTiming]:
    return [w for e in got for w in e.words]


def request_with(options: TextOptions, mode: Mode = Mode.SYNTHESIZE) -> StreamRequest:
    return dataclasses.replace(request(mode, paced=False), text_options=options)


def test_words_slice_the_request_and_start_with_their_sound(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    req = request(paced=False)
    submit(redis_url, req, WORDS_TEXT)
    got = events(redis_url, req.request_id)
    words = words_of(got)
    assert [w.text for w in words] == [  # "$3.5M" is spoken as five words: one span
        *["I", "paid", "$3.5M", "on", "Monday"],
        *["Then", "we", "left", "for", "home"],
    ]
    assert all(WORDS_TEXT[w.char_start : w.char_end] == w.text for w in words)
    starts = [w.start_ms for w in words]
    assert starts == sorted(set(starts)) and all(w.end_ms > w.start_ms for w in words)
    # On the captions' clock: each sentence's words come at or after its caption, and its
    # first word starts with its sound (espeak's own pause before it: measured).
    pcm = decoded(got)
    captions = [e for e in got if e.kind is EventKind.CAPTION]
    for caption in captions:
        inside = [w for w in words if caption.start <= w.char_start < caption.end]
        assert inside and inside[0].start_ms >= caption.pts_ms
        assert abs(inside[0].start_ms - onset_ms(pcm, inside[0].start_ms - 150)) <= 30
    # They ride on the first audio entry of their sentence (with its caption).
    first_audio = {e.sentence: e for e in reversed(audio_of(got))}
    assert [w.text for w in first_audio[1].words] == ["Then", "we", "left", "for", "home"]


def break_document(pause_ms: int) -> str:
    return f'<speak>Hello there. <break time="{pause_ms}ms"/> Goodbye now.</speak>'


@pytest.mark.parametrize("pause_ms", [150, 900])
def test_a_break_is_exactly_its_silence_in_the_decoded_stream(
    redis_url: str,
    espeak_consumer: RealtimeConsumer,
    pause_ms: int,
) -> None:
    """espeak's own pause between the sentences is ~310 ms: replaced, not added to."""
    req = request_with(TextOptions(ssml=True))
    submit(redis_url, req, break_document(pause_ms))
    got = events(redis_url, req.request_id)
    pcm = decoded(got)
    gap_ms = quiet_runs_ms(pcm)[0]
    assert abs(gap_ms - pause_ms) <= 50, (gap_ms, pause_ms)
    goodbye = next(w for w in words_of(got) if w.text == "Goodbye")
    assert abs(goodbye.start_ms - onset_ms(pcm, goodbye.start_ms - 100)) <= 30


def test_a_break_in_a_live_stream_is_real_audio_time(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    req = dataclasses.replace(request(), text_options=TextOptions(ssml=True))  # paced
    submit(redis_url, req, break_document(2000))
    got = events(redis_url, req.request_id)
    audio = audio_of(got)
    assert [e.seq for e in audio] == list(range(len(audio)))
    # The break's silence goes out as packets on the stream's clock, as speech does.
    assert abs(quiet_runs_ms(decoded(got))[0] - 2000) <= 50
    end_pts = audio[-1].pts_ms + 20 * len(audio[-1].data)
    assert end_pts >= 2000 + 1000


def segment_rms(pcm: PcmF32, start_ms: float, end_ms: float) -> float:
    part = pcm[int(start_ms * 24) : int(end_ms * 24)]
    return float(np.sqrt(np.mean(part**2)))


def test_voicing_changes_the_segments_voice_rate_and_volume(
    redis_url: str, espeak_consumer: RealtimeConsumer
) -> None:
    text = (
        "<speak>One more time. "
        '<prosody rate="200%" volume="-12dB">One more time.</prosody> '
        '<voice name="en-gb"><prosody pitch="+6st">One more time.</prosody></voice></speak>'
    )
    req = request_with(TextOptions(ssml=True))
    submit(redis_url, req, text)
    got = events(redis_url, req.request_id)
    pcm = decoded(got)
    starts = [c.pts_ms for c in got if c.kind is EventKind.CAPTION] + [len(pcm) / 24]
    plain, fast_soft, other = ((starts[i], starts[i + 1]) for i in range(3))
    # rate 2.0: about half as long; -12 dB: a quarter of the amplitude.
    assert (fast_soft[1] - fast_soft[0]) < 0.7 * (plain[1] - plain[0])
    ratio = segment_rms(pcm, *fast_soft) / segment_rms(pcm, *plain)
    assert 0.18 < ratio < 0.33, ratio
    # Another voice, another pitch: the engine was asked for them (its own render of that
    # voicing lasts as long as the segment).
    engine = EspeakEngine()
    asked = Utterance("One more time.", "en-gb", params=(("pitch_semitones", 6),))
    own = engine.synthesize([asked])[0]
    us = engine.synthesize([Utterance("One more time.", "auto")])[0]
    assert len(own) != len(us) or not np.allclose(own, us)
    assert (other[1] - other[0]) / 1000 == pytest.approx(len(own) / engine.sample_rate_hz, abs=0.03)


def test_marks_arrive_with_their_times(redis_url: str, espeak_consumer: RealtimeConsumer) -> None:
    document = (
        '<speak>Hello <mark name="before-there"/>there. Goodbye now.<mark name="end"/></speak>'
    )
    req = request_with(TextOptions(ssml=True))
    submit(redis_url, req, document)
    got = events(redis_url, req.request_id)
    marks = [(m.name, m.time_ms) for e in got for m in e.marks]
    there = next(w for w in words_of(got) if w.text == "there")
    end = got[-1]
    assert end.kind is EventKind.END
    assert marks[0] == ("before-there", there.start_ms)
    assert [m.name for m in end.marks] == ["end"]  # after the last word: on the end
    assert abs(marks[1][1] - len(decoded(got)) / 24) <= 20  # at the end of the audio


def test_a_document_is_read_whole_only_by_synthesize(
    redis_url: str, espeak_consumer: RealtimeConsumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare = RecordingPrepare()
    monkeypatch.setattr(realtime, "prepare_text", prepare)
    document = "<speak>Hello there. Goodbye now.</speak>"
    req = request_with(TextOptions())  # ssml unset: the text says
    submit(redis_url, req, document)
    assert events(redis_url, req.request_id)[-1].kind is EventKind.END
    assert prepare.seen == [True]  # one document, read as SSML

    prepare.seen.clear()
    conversation = request_with(TextOptions(), Mode.CONVERSE)
    submit(redis_url, conversation, None)

    async def send() -> None:
        client = RealtimeClient.from_url(redis_url)
        await client.send_input(conversation.request_id, InputPiece(InputKind.TEXT, document))
        await client.send_input(conversation.request_id, InputPiece(InputKind.END))
        await client.close()

    asyncio.run(send())
    assert events(redis_url, conversation.request_id)[-1].kind is EventKind.END
    assert prepare.seen and set(prepare.seen) == {False}  # plain text, sentence by sentence


@dataclasses.dataclass
class RecordingPrepare:
    """``prepare_text`` itself, recording the ``ssml`` option of every call."""

    seen: list[bool | None] = dataclasses.field(default_factory=list)

    def __call__(self, text: str, **kwargs: Any) -> PreparedText:
        self.seen.append(kwargs["options"].ssml)
        return prepare_text(text, **kwargs)
