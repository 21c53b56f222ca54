// Batch jobs: submit the text or a file, follow it with a progress bar (ETA, current
// chapter), then link its audio and subtitles; the tenant's recent jobs with cancel.

import { call } from "./api.js";

const POLL_MS = 500;
const FINAL = new Set(["done", "failed", "cancelled"]);

function seconds(value) {
  if (value === null || value === undefined) return "";
  if (value < 60) return `${Math.round(value)} s`;
  return `${Math.floor(value / 60)} min ${Math.round(value % 60)} s`;
}

/** The chapter being rendered: the first one not done yet. */
function currentChapter(job) {
  const chapters = job.chapters || [];
  return chapters.find((c) => c.progress < 1) || null;
}

export class Jobs {
  /** `els`: the page's elements; `onError(sentence)`; `options()`: voice, speed, format. */
  constructor(els, { onError, options }) {
    this.els = els;
    this.onError = onError;
    this.options = options;
    this.polling = null;
  }

  async submit(text) {
    const { voice, speed, format } = this.options();
    const file = this.els.file.files[0];
    this.reset();
    let job;
    if (file) {
      const form = new FormData();
      form.append("file", file, file.name);
      form.append("format", format);
      if (voice && voice !== "auto") form.append("voice", voice);
      if (speed) form.append("speed", String(speed));
      job = await call("/v1/jobs", { method: "POST", form });
    } else {
      const body = { text, format };
      if (voice && voice !== "auto") body.voice = voice;
      if (speed) body.speed = speed;
      job = await call("/v1/jobs", { method: "POST", json: body });
    }
    this.show(job);
    this.follow(job.id);
    this.refreshList().catch((error) => this.onError(error.message));
    return job;
  }

  reset() {
    clearTimeout(this.polling);
    this.polling = null;
    const { progress, status, download, subtitles } = this.els;
    progress.value = 0;
    progress.removeAttribute("aria-valuetext");
    status.textContent = "";
    for (const link of [download, subtitles]) {
      link.hidden = true;
      link.removeAttribute("href");
    }
  }

  follow(jobId) {
    const poll = async () => {
      let job;
      try {
        job = await call(`/v1/jobs/${encodeURIComponent(jobId)}`);
      } catch (error) {
        this.onError(error.message);
        return;
      }
      this.show(job);
      if (FINAL.has(job.state)) {
        this.refreshList().catch((error) => this.onError(error.message));
        return;
      }
      this.polling = setTimeout(poll, POLL_MS);
    };
    this.polling = setTimeout(poll, POLL_MS);
  }

  show(job) {
    const { progress, status, download, subtitles } = this.els;
    const fraction = job.state === "done" ? 1 : Number(job.progress || 0);
    progress.value = fraction;
    const parts = [`${job.state}`, `${Math.round(fraction * 100)} %`];
    if (job.eta_s !== null && job.eta_s !== undefined && !FINAL.has(job.state)) {
      parts.push(`about ${seconds(job.eta_s)} left`);
    }
    const chapter = currentChapter(job);
    if (chapter && !FINAL.has(job.state)) parts.push(`chapter: ${chapter.title}`);
    if (job.title) parts.push(`“${job.title}”`);
    const text = parts.join(" · ");
    status.textContent = text;
    progress.setAttribute("aria-valuetext", text);
    if (job.state === "failed") {
      const reason = job.error ? (job.error.message || JSON.stringify(job.error)) : "no reason given";
      this.onError(`The job failed: ${reason}`);
    }
    if (job.state === "done" && job.download_url) {
      download.href = job.download_url;
      download.setAttribute("download", "");
      download.textContent = `Download the audio (${job.format}, ${seconds(job.output?.duration_s)})`;
      download.hidden = false;
      const vtt = job.subtitles_urls && job.subtitles_urls.vtt;
      if (vtt) {
        subtitles.href = vtt;
        subtitles.setAttribute("download", "");
        subtitles.hidden = false;
      }
    }
  }

  async refreshList() {
    const page = await call("/v1/jobs?limit=10");
    const rows = page.jobs.map((job) => this.row(job));
    this.els.list.replaceChildren(...rows);
  }

  row(job) {
    const tr = document.createElement("tr");
    const cells = [
      job.id.slice(0, 8),
      job.state,
      `${Math.round(Number(job.progress || 0) * 100)} %`,
      job.format,
      new Date(job.created_at * 1000).toLocaleTimeString(),
    ];
    for (const [index, value] of cells.entries()) {
      const td = document.createElement("td");
      if (index === 0) {
        const code = document.createElement("code");
        code.textContent = value;
        code.title = job.id;
        td.append(code);
      } else {
        td.textContent = value;
      }
      tr.append(td);
    }
    const action = document.createElement("td");
    if (!FINAL.has(job.state)) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = "Cancel";
      button.setAttribute("aria-label", `Cancel job ${job.id.slice(0, 8)}`);
      button.addEventListener("click", async () => {
        button.disabled = true;
        try {
          await call(`/v1/jobs/${encodeURIComponent(job.id)}`, { method: "DELETE" });
        } catch (error) {
          this.onError(error.message);
        }
        this.refreshList().catch((error) => this.onError(error.message));
      });
      action.append(button);
    }
    tr.append(action);
    return tr;
  }
}
