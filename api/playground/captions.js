// The text being spoken, one span per word (or per sentence where the engine gives no word
// timings), the one being heard marked aria-current="true". Driven by the playback clock
// (the stream time of the audio now at the speakers), never by when the timings arrived.

/** A list of timed spans of a text, rendered into `element`. */
export class Captions {
  constructor(element) {
    this.element = element;
    this.reset("");
  }

  /**
   * A new stream of `text` (the text sent: word and sentence spans are code-point offsets
   * into it). `chat`: the text is not known ahead: the spoken sentences are shown as they
   * come (the captions' own text), one span each.
   */
  reset(text, { chat = false } = {}) {
    this.chat = chat;
    this.codePoints = Array.from(text);
    this.words = [];
    this.sentences = [];
    this.items = [];
    this.spans = [];
    this.current = -1;
    this.endMs = Infinity;
    this.render();
  }

  /** What one `audio` or `end` message carried: its `captions` and `words`. */
  add({ captions = [], words = [] }) {
    if (!captions.length && !words.length) return;
    for (const c of captions) this.sentences.push(c);
    if (!this.chat) for (const w of words) this.words.push(w);
    this.render();
  }

  /** The stream's last audio ends at `endMs`: the last sentence is lit until then. */
  end(endMs) {
    this.endMs = endMs;
  }

  /** The timed items: words where the engine gives them, else sentences. */
  timedItems() {
    if (this.words.length) {
      return this.words.map((w) => ({
        start: w.char_start, end: w.char_end, startMs: w.start_ms, endMs: w.end_ms, text: null,
      }));
    }
    const sorted = [...this.sentences].sort((a, b) => a.pts_ms - b.pts_ms);
    return sorted.map((c, i) => ({
      start: c.start,
      end: c.end,
      startMs: c.pts_ms,
      endMs: i + 1 < sorted.length ? sorted[i + 1].pts_ms : this.endMs,
      text: c.text,
    }));
  }

  render() {
    const items = this.timedItems().sort((a, b) => a.startMs - b.startMs || a.start - b.start);
    const fragment = document.createDocumentFragment();
    const spans = [];
    if (this.chat) {
      items.forEach((item, index) => {
        if (index) fragment.append(" ");
        spans.push(this.span(item, item.text));
        fragment.append(spans[spans.length - 1]);
      });
    } else {
      // Spans in text order; a span overlapping the previous one is left unmarked.
      const byPosition = items.map((item, index) => ({ item, index }))
        .sort((a, b) => a.item.start - b.item.start);
      const made = new Array(items.length).fill(null);
      let at = 0;
      for (const { item, index } of byPosition) {
        if (item.start < at || item.end <= item.start) continue;
        fragment.append(this.codePoints.slice(at, item.start).join(""));
        made[index] = this.span(item, this.codePoints.slice(item.start, item.end).join(""));
        fragment.append(made[index]);
        at = item.end;
      }
      fragment.append(this.codePoints.slice(at).join(""));
      for (const span of made) spans.push(span);
    }
    this.items = items;
    this.spans = spans;
    this.element.replaceChildren(fragment);
    const current = this.current;
    this.current = -1;
    this.highlight(current);
  }

  span(item, text) {
    const span = document.createElement("span");
    span.textContent = text;
    span.dataset.startMs = String(item.startMs);
    span.dataset.endMs = String(item.endMs);
    return span;
  }

  /** Light the item heard at stream time `streamMs` (the last one started by then). */
  update(streamMs) {
    let index = -1;
    for (let i = 0; i < this.items.length; i += 1) {
      if (this.items[i].startMs <= streamMs) index = i;
      else break;
    }
    this.highlight(index);
  }

  highlight(index) {
    if (index === this.current) return;
    const old = this.spans[this.current];
    if (old) old.removeAttribute("aria-current");
    this.current = index;
    const now = this.spans[index];
    if (now) now.setAttribute("aria-current", "true");
  }
}
