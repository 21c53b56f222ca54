// The playground page: wires the controls to the API (api.js), the live player
// (stream.js), the captions (captions.js) and the jobs (jobs.js). docs/playground.md.

import { call, loadKey, saveKey } from "./api.js";
import { Captions } from "./captions.js";
import { Jobs } from "./jobs.js";
import { LiveSpeech, audioContext } from "./stream.js";

const TICK_MS = 50; // played-ms and the highlighted word: 20 updates a second

const $ = (id) => document.getElementById(id);
const els = {
  key: $("api-key"),
  error: $("error"),
  text: $("text"),
  voice: $("voice"),
  voicesReload: $("voices-reload"),
  format: $("format"),
  speed: $("speed"),
  speak: $("speak"),
  stop: $("stop"),
  firstAudio: $("first-audio-ms"),
  played: $("played-ms"),
  status: $("speak-status"),
  captions: $("captions"),
  jobFile: $("job-file"),
  jobSubmit: $("job-submit"),
  jobProgress: $("job-progress"),
  jobStatus: $("job-status"),
  jobDownload: $("job-download"),
  jobSubtitles: $("job-subtitles"),
  jobsReload: $("jobs-reload"),
  jobsBody: $("jobs-body"),
  chatInput: $("chat-input"),
  chatSend: $("chat-send"),
  chatReply: $("chat-reply"),
};

function showError(sentence) {
  els.error.textContent = sentence;
}

function clearError() {
  els.error.textContent = "";
}

function requestOptions() {
  const speed = Number(els.speed.value);
  return {
    voice: els.voice.value || "auto",
    speed: Number.isFinite(speed) && speed > 0 ? speed : null,
    format: els.format.value,
  };
}

// ---- the API key -------------------------------------------------------------------------

els.key.value = loadKey();
els.key.addEventListener("input", () => saveKey(els.key.value.trim()));
els.key.addEventListener("change", () => {
  saveKey(els.key.value.trim());
  loadVoices();
});
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault(); // Enter in the key field: use the key, stay on the page
  saveKey(els.key.value.trim());
  clearError();
  loadVoices();
  jobs.refreshList().catch((error) => showError(error.message));
});

// ---- voices ------------------------------------------------------------------------------

async function loadVoices() {
  if (!loadKey()) return;
  let listing;
  try {
    listing = await call("/v1/voices");
  } catch (error) {
    showError(`Could not list the voices: ${error.message}`);
    return;
  }
  const chosen = els.voice.value;
  const options = [new Option("auto (the first engine with a voice for the text's language)", "auto")];
  for (const engine of listing.engines || []) {
    const group = document.createElement("optgroup");
    const timing = engine.word_timings ? "word timings" : "sentence timings";
    group.label = `${engine.engine} (${engine.sample_rate_hz} Hz, ${timing})`;
    for (const voice of engine.voices || []) {
      const languages = (voice.languages || []).join(", ");
      const label = `${voice.name || voice.id}${languages ? ` — ${languages}` : ""}`;
      group.append(new Option(label, voice.id));
    }
    options.push(group);
  }
  const custom = (listing.custom && listing.custom.voices) || [];
  if (custom.length) {
    const group = document.createElement("optgroup");
    group.label = "your voices";
    for (const voice of custom) group.append(new Option(`${voice.name} (${voice.engine})`, voice.name));
    options.push(group);
  }
  els.voice.replaceChildren(...options);
  if ([...els.voice.options].some((o) => o.value === chosen)) els.voice.value = chosen;
  if (listing.speed) {
    els.speed.min = String(listing.speed.min);
    els.speed.max = String(listing.speed.max);
  }
}

els.voicesReload.addEventListener("click", () => {
  clearError();
  loadVoices();
});

// ---- live speech (Speak and Chat share one player: a new one stops the old) ---------------

const captions = new Captions(els.captions);
let live = null;

function stopLive() {
  if (live) live.stop();
}

function startLive(request, { chat = false } = {}) {
  stopLive(); // barge-in: the old stream is silenced and its socket closed first
  clearError();
  els.firstAudio.textContent = "";
  els.played.textContent = "0";
  captions.reset(chat ? "" : request.text, { chat });
  if (chat) els.chatReply.textContent = "";
  const player = new LiveSpeech({
    onStart: () => {
      if (live === player) els.status.textContent = "streaming";
    },
    onFirstAudio: (ms) => {
      if (live === player) els.firstAudio.textContent = String(ms);
    },
    onTimings: (message) => {
      if (live !== player) return;
      captions.add(message);
      if (message.type === "end") captions.end(message.pts_ms);
    },
    onText: (delta) => {
      if (live === player) els.chatReply.append(delta);
    },
    onEnd: () => {
      if (live === player) els.status.textContent = "all audio received";
    },
    onError: (sentence) => {
      if (live !== player) return;
      showError(sentence);
      els.status.textContent = "failed";
    },
  });
  live = player;
  els.status.textContent = "connecting";
  audioContext(); // made (or resumed) inside the click: browsers' autoplay rules
  player.start({ ...request, api_key: loadKey() || undefined });
}

function tick() {
  if (!live) return;
  els.played.textContent = String(live.playedMs());
  if (!live.stopped) captions.update(live.streamMsNow());
  if (live.finished() && els.status.textContent !== "done") els.status.textContent = "done";
}
setInterval(tick, TICK_MS);

els.speak.addEventListener("click", () => {
  const text = els.text.value;
  if (!text.trim()) {
    showError("Type a text to speak first.");
    return;
  }
  const { voice, speed } = requestOptions();
  const request = { text, voice };
  if (speed) request.speed = speed;
  startLive(request);
});

els.stop.addEventListener("click", () => {
  stopLive();
  tick();
  els.status.textContent = "stopped";
});

// ---- chat --------------------------------------------------------------------------------

const history = [];
let chatReplyPending = false; // the reply shown belongs to the last user message

function sendChat() {
  const content = els.chatInput.value.trim();
  if (!content) {
    showError("Type a message for the LLM first.");
    return;
  }
  // The previous reply (whole, or as far as it got before this barge-in) joins the history.
  const previous = els.chatReply.textContent;
  if (chatReplyPending && previous) history.push({ role: "assistant", content: previous });
  history.push({ role: "user", content });
  chatReplyPending = true;
  const { voice, speed } = requestOptions();
  const request = { messages: history.slice(-10), voice };
  if (speed) request.speed = speed;
  startLive(request, { chat: true });
}

els.chatSend.addEventListener("click", sendChat);
els.chatInput.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    sendChat();
  }
});

// ---- jobs --------------------------------------------------------------------------------

const jobs = new Jobs(
  {
    file: els.jobFile,
    progress: els.jobProgress,
    status: els.jobStatus,
    download: els.jobDownload,
    subtitles: els.jobSubtitles,
    list: els.jobsBody,
  },
  { onError: showError, options: requestOptions },
);

els.jobSubmit.addEventListener("click", async () => {
  clearError();
  if (!els.jobFile.files.length && !els.text.value.trim()) {
    showError("Type a text or choose a file to render first.");
    return;
  }
  els.jobSubmit.disabled = true;
  try {
    await jobs.submit(els.text.value);
  } catch (error) {
    showError(error.message);
  } finally {
    els.jobSubmit.disabled = false;
  }
});

els.jobsReload.addEventListener("click", () => {
  clearError();
  jobs.refreshList().catch((error) => showError(error.message));
});

// ---- start -------------------------------------------------------------------------------

if (loadKey()) {
  loadVoices();
  jobs.refreshList().catch(() => {});
}
