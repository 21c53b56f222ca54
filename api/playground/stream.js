// Live speech over the WebSocket `/v1/stream`: the request (with the key in it: a browser
// cannot set headers on a WebSocket), 20 ms Opus packets decoded by WebCodecs' AudioDecoder
// and scheduled on an AudioContext at a running play-head. The playback clock (which stream
// time is at the speakers now) drives played-ms and the captions.

import { describe } from "./api.js";

const FIRST_LEAD_S = 0.05; // the first buffer starts this far ahead of "now"
const REFILL_LEAD_S = 0.03; // after an underrun, the next buffer starts this far ahead

let sharedContext = null;

/** The page's one AudioContext (made on the first click: autoplay rules). */
export function audioContext() {
  if (!sharedContext) sharedContext = new AudioContext({ latencyHint: "interactive" });
  if (sharedContext.state === "suspended") sharedContext.resume();
  return sharedContext;
}

/** Whether this browser decodes Opus with WebCodecs (resolves to a reason when not). */
export async function opusSupport(sampleRateHz = 48000) {
  if (typeof AudioDecoder === "undefined") return "this browser has no WebCodecs AudioDecoder";
  try {
    const { supported } = await AudioDecoder.isConfigSupported({
      codec: "opus", sampleRate: sampleRateHz, numberOfChannels: 1,
    });
    return supported ? null : "this browser's WebCodecs cannot decode Opus";
  } catch (error) {
    return `WebCodecs refused Opus: ${error.message || error}`;
  }
}

export function streamUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/stream`;
}

/**
 * One live stream: `start(request)` opens the socket and plays; `stop()` silences it at
 * once. Callbacks: onStart(requestId), onFirstAudio(ms), onTimings(message),
 * onText(delta), onEnd(), onError(sentence), onStats(stats).
 */
export class LiveSpeech {
  constructor(callbacks) {
    this.on = callbacks;
    this.socket = null;
    this.decoder = null;
    this.output = null; // a GainNode per stream: disconnecting it silences everything at once
    this.sources = [];
    this.buffers = []; // {ctxStart, streamMs, durationS} in play order
    this.playHead = 0;
    this.stopped = false;
    this.ended = false;
    this.sentAt = 0;
    this.firstAudioMs = null;
    this.packetsDue = 0;
    this.nextPts = 0;
    this.frozenPlayedMs = null;
  }

  /** `request`: the first message's fields (text or messages, voice, speed...). */
  async start(request) {
    const problem = await opusSupport();
    if (this.stopped) return; // stopped (or barged in on) while asking
    if (problem) {
      this.fail(`Cannot play live audio: ${problem}.`);
      return;
    }
    const context = audioContext();
    this.context = context;
    this.output = context.createGain();
    this.output.connect(context.destination);
    this.sentAt = performance.now();
    let socket;
    try {
      socket = new WebSocket(streamUrl());
    } catch (error) {
      this.fail(`Cannot open the WebSocket: ${error.message || error}.`);
      return;
    }
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    socket.onopen = () => {
      this.sentAt = performance.now();
      socket.send(JSON.stringify({ ...request, client_ts_ms: Math.round(Date.now()) }));
    };
    socket.onmessage = (event) => this.receive(event.data);
    socket.onerror = () => {
      if (!this.stopped && !this.ended) {
        this.fail(`The WebSocket to ${location.host} failed (network error or the server went away).`);
      }
    };
    socket.onclose = (event) => {
      if (this.stopped || this.ended || this.failed) return;
      this.fail(`The stream closed before its end (code ${event.code}${event.reason ? `: ${event.reason}` : ""}).`);
    };
  }

  receive(data) {
    if (this.stopped) return;
    if (typeof data !== "string") {
      this.packet(new Uint8Array(data));
      return;
    }
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      this.fail("The server sent a message that is not JSON.");
      return;
    }
    switch (message.type) {
      case "start":
        this.on.onStart?.(message.request_id);
        break;
      case "audio":
        this.ensureDecoder(message.sample_rate_hz);
        this.packetsDue = message.packets;
        this.nextPts = message.pts_ms;
        this.on.onTimings?.(message);
        break;
      case "text":
        this.on.onText?.(message.delta);
        break;
      case "stats":
        this.on.onStats?.(message);
        break;
      case "end":
        this.ended = true;
        this.on.onTimings?.(message);
        this.on.onEnd?.(message);
        this.flush();
        break;
      case "error":
        this.fail(describe({
          code: message.error_code || message.code,
          message: message.message,
          retryAfterS: message.retry_after_s,
        }));
        break;
      default:
        break;
    }
  }

  ensureDecoder(sampleRateHz) {
    if (this.decoder) return;
    this.decoder = new AudioDecoder({
      output: (audio) => this.schedule(audio),
      error: (error) => this.fail(`The Opus decoder failed: ${error.message || error}.`),
    });
    this.decoder.configure({ codec: "opus", sampleRate: sampleRateHz, numberOfChannels: 1 });
  }

  packet(bytes) {
    if (!this.decoder) {
      this.fail("The server sent audio before its header.");
      return;
    }
    const timestampUs = Math.round(this.nextPts * 1000);
    this.nextPts += 20;
    this.packetsDue -= 1;
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: timestampUs, data: bytes }));
  }

  async flush() {
    if (!this.decoder || this.decoder.state !== "configured") return;
    try {
      await this.decoder.flush();
    } catch {
      // stopped meanwhile
    }
  }

  /** Put one decoded piece on the play-head (later pieces follow it without a gap). */
  schedule(audio) {
    try {
      if (this.stopped) return;
      const context = this.context;
      const frames = audio.numberOfFrames;
      const buffer = context.createBuffer(1, frames, audio.sampleRate);
      const samples = new Float32Array(frames);
      audio.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
      buffer.copyToChannel(samples, 0);
      const now = context.currentTime;
      if (!this.buffers.length) this.playHead = now + FIRST_LEAD_S;
      else if (this.playHead < now + 0.005) this.playHead = now + REFILL_LEAD_S; // underrun
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(this.output);
      source.start(this.playHead);
      source.onended = () => {
        const at = this.sources.indexOf(source);
        if (at >= 0) this.sources.splice(at, 1);
      };
      this.sources.push(source);
      this.buffers.push({
        ctxStart: this.playHead, streamMs: audio.timestamp / 1000, durationS: buffer.duration,
      });
      if (this.firstAudioMs === null) {
        const latencyS = (context.outputLatency || 0) + (this.playHead - now);
        this.firstAudioMs = Math.round(performance.now() - this.sentAt + latencyS * 1000);
        this.on.onFirstAudio?.(this.firstAudioMs);
      }
      this.playHead += buffer.duration;
    } finally {
      audio.close();
    }
  }

  /** Milliseconds of this stream's audio played so far (from the AudioContext's clock). */
  playedMs() {
    if (this.frozenPlayedMs !== null) return this.frozenPlayedMs;
    if (!this.context) return 0;
    const now = this.context.currentTime;
    let playedS = 0;
    for (const b of this.buffers) {
      if (b.ctxStart >= now) break;
      playedS += Math.min(now - b.ctxStart, b.durationS);
    }
    return Math.round(playedS * 1000);
  }

  /** The stream time (ms) of the audio at the speakers now, or -1 before the first. */
  streamMsNow() {
    if (!this.context || !this.buffers.length) return -1;
    const now = this.context.currentTime;
    let at = -1;
    for (const b of this.buffers) {
      if (b.ctxStart > now) break;
      at = b.streamMs + Math.min(now - b.ctxStart, b.durationS) * 1000;
    }
    return at;
  }

  /** Whether every scheduled piece has played (after the end message). */
  finished() {
    if (!this.ended || !this.context) return false;
    return this.context.currentTime >= this.playHead && this.sources.length === 0;
  }

  fail(sentence) {
    if (this.failed || this.stopped) return;
    this.failed = true;
    this.on.onError?.(sentence);
    this.close();
  }

  /** Silence now and drop the stream (closing the socket cancels it on the server). */
  stop() {
    if (this.stopped) return;
    this.frozenPlayedMs = this.playedMs();
    this.stopped = true;
    this.close();
  }

  close() {
    if (this.frozenPlayedMs === null) this.frozenPlayedMs = this.playedMs();
    if (this.output) {
      this.output.disconnect(); // silent at once, whatever is still scheduled
    }
    for (const source of this.sources) {
      try {
        source.stop();
      } catch {
        // not started yet
      }
      source.disconnect();
    }
    this.sources = [];
    if (this.socket && this.socket.readyState <= WebSocket.OPEN) this.socket.close(1000);
    if (this.decoder && this.decoder.state !== "closed") {
      try {
        this.decoder.close();
      } catch {
        // already closed
      }
    }
  }
}
