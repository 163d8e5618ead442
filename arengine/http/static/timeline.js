// The timeline: waveform, spectrogram, one track of tags per model, a time ruler and a cursor,
// all drawn for the visible stretch only (zoom and scroll change the stretch).
//
// Why the spectrogram is computed here and not served as an image: the browser already holds the
// file, so an image would mean sending a 2-hour upload twice or keeping it on the server, and one
// image per zoom level. Here each pixel column costs one 512-point FFT at the column's time and
// one min/max over a precomputed summary, so a redraw costs the same for 5 minutes or 2 hours;
// only the decode (once, at a low sample rate for big files) grows with the length.
"use strict";

export const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const FFT = 512;
const BLOCK = 256; // samples per entry of the waveform summary
const MIN_SPAN_S = 0.5;
// A track split by label (events, birds, music: many independent classes at once) has an
// overview lane with every tag, then one lane per label in the model's own label order, which
// keeps related labels together (AudioSet's class map follows its ontology: Alarm, Telephone,
// Telephone bell ringing, Ringtone; BirdNET's is by scientific name, so by genus); a group a
// profile reports (glass, alarm) comes first. The first MAX_LANES labels to arrive get a lane,
// the rest share a last one, so 521 classes never make a 521-lane track.
const LANE_PX = 18;
const MAX_LANES = 12;

export class Timeline {
  constructor(root, onSeek, onTag) {
    this.root = root;
    this.wave = root.querySelector("#wave");
    this.spec = root.querySelector("#spectrogram");
    this.ruler = root.querySelector("#ruler");
    this.tracks = root.querySelector("#tracks");
    this.cursor = root.querySelector("#cursor");
    this.onSeek = onSeek;
    this.onTag = onTag;
    this.reset(0, null);
    root.addEventListener("wheel", (event) => this.wheel(event), { passive: false });
    root.addEventListener("click", (event) => this.click(event));
  }

  reset(duration, audio) {
    this.duration = duration;
    this.audio = audio;
    this.summary = audio ? summarize(audio.getChannelData(0)) : null;
    this.view = { start: 0, end: duration || 1 };
    this.labels = new Map();
    this.tracks.replaceChildren();
    this.trackTags = new Map();
    this.lanes = new Map(); // model -> its lanes' labels, for a track split by label
    this.laneOrder = new Map(); // model -> label -> its place in the model's labels
    this.stale = new Set();
    this.position = 0;
  }

  setDuration(duration) {
    if (duration && !this.duration) {
      this.duration = duration;
      this.show(0, duration);
    }
  }

  // A live stream: the timeline grows with the audio received, all of it in view.
  grow(duration) {
    if (!(duration > this.duration)) return;
    this.duration = duration;
    this.show(0, duration);
  }

  colorOf(label) {
    if (!this.labels.has(label)) this.labels.set(label, COLORS[this.labels.size % COLORS.length]);
    return this.labels.get(label);
  }

  // `byLabel`: a lane per label once the track holds two labels (not for notes: a pitch track's
  // notes are one melody), in the order of `labels` (the model's).
  addTrack(model, { byLabel = false, labels = [] } = {}) {
    const row = document.createElement("div");
    row.className = "track";
    row.dataset.model = model;
    const names = document.createElement("div");
    const name = document.createElement("span");
    name.className = "track-name";
    name.textContent = model;
    const lanes = document.createElement("ol");
    lanes.className = "lanes";
    names.append(name, lanes);
    const canvas = document.createElement("canvas");
    canvas.className = "track-canvas";
    row.append(names, canvas);
    this.tracks.append(row);
    this.trackTags.set(model, []);
    if (byLabel) this.lanes.set(model, []);
    this.laneOrder.set(model, new Map(labels.map((label, index) => [label, index])));
  }

  addTags(model, tags) {
    this.trackTags.get(model).push(...tags);
    tags.forEach((tag) => this.colorOf(tag.label));
    const lanes = this.lanes.get(model);
    if (lanes) {
      for (const tag of tags) {
        if (lanes.length <= MAX_LANES && !lanes.includes(tag.label)) lanes.push(tag.label);
      }
    }
    // One redraw per frame however many batches arrive: a long pitch track has thousands of tags.
    this.stale.add(model);
    this.frame = this.frame || requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    for (const model of this.stale) if (this.trackTags.has(model)) this.drawTrack(model);
    this.stale.clear();
  }

  // Zoom and scroll ------------------------------------------------------------------------------
  get span() {
    return this.view.end - this.view.start;
  }

  show(start, end) {
    const duration = this.duration || 1;
    const span = Math.min(Math.max(end - start, MIN_SPAN_S), duration);
    const begin = Math.min(Math.max(start, 0), duration - span);
    this.view = { start: begin, end: begin + span };
    this.draw();
    this.root.dispatchEvent(new CustomEvent("viewchange", { detail: this.view }));
  }

  zoom(factor, at = (this.view.start + this.view.end) / 2) {
    const span = this.span * factor;
    const share = (at - this.view.start) / this.span;
    this.show(at - share * span, at - share * span + span);
  }

  scrollTo(fraction) {
    this.show(fraction * (this.duration - this.span), fraction * (this.duration - this.span) + this.span);
  }

  timeAt(clientX) {
    const box = this.wave.getBoundingClientRect();
    return this.view.start + ((clientX - box.left) / box.width) * this.span;
  }

  wheel(event) {
    event.preventDefault();
    if (Math.abs(event.deltaX) > Math.abs(event.deltaY) || event.shiftKey) {
      const delta = (event.shiftKey ? event.deltaY : event.deltaX) / 500;
      this.show(this.view.start + delta * this.span, this.view.end + delta * this.span);
    } else {
      this.zoom(event.deltaY > 0 ? 1.25 : 0.8, this.timeAt(event.clientX));
    }
  }

  click(event) {
    const time = this.timeAt(event.clientX);
    const row = event.target.closest(".track");
    const tag = row && this.tagAt(row.dataset.model, time, event.clientY);
    if (tag) this.onTag(row.dataset.model, tag);
    else if (event.target.tagName === "CANVAS") this.onSeek(time);
  }

  // The tag under a point of a track: on a label's lane, that label's; else any.
  tagAt(model, time, clientY) {
    const slack = (2 * this.span) / this.wave.getBoundingClientRect().width; // 2 px
    const canvas = this.tracks.querySelector(`.track[data-model="${CSS.escape(model)}"] canvas`);
    const lane = canvas ? Math.floor((clientY - canvas.getBoundingClientRect().top) / LANE_PX) - 1 : -1;
    const labels = this.shownLanes(model);
    const tags = (this.trackTags.get(model) || []).filter(
      (tag) => lane < 0 || lane >= labels.length || this.laneOf(labels, tag.label) === lane
    );
    return tags.find((tag) => tag.start - slack <= time && time <= tag.end + slack) || null;
  }

  // The labels of a track's lanes (the last one "other" past MAX_LANES); [] while it is not
  // split (fewer than two labels, or a track not split by label).
  shownLanes(model) {
    const labels = this.lanes.get(model) || [];
    if (labels.length < 2) return [];
    const order = this.laneOrder.get(model);
    const place = (label) => (order.has(label) ? order.get(label) : -1);
    const shown = labels.slice(0, MAX_LANES).sort((a, b) => place(a) - place(b));
    return labels.length > MAX_LANES ? [...shown, null] : shown;
  }

  laneOf(labels, label) {
    const index = labels.indexOf(label);
    return index >= 0 ? index : labels.length - 1; // past MAX_LANES: the shared last lane
  }

  // The lanes' names beside the track and its height: one overview lane, then one per label.
  layoutLanes(model) {
    const row = this.tracks.querySelector(`.track[data-model="${CSS.escape(model)}"]`);
    const labels = this.shownLanes(model);
    const list = row.querySelector(".lanes");
    const names = labels.map((label) => (label === null ? "other labels" : label));
    if ([...list.children].map((item) => item.textContent).join("\n") === names.join("\n")) return;
    row.classList.toggle("split", labels.length > 0);
    list.replaceChildren(
      ...labels.map((label) => {
        const item = document.createElement("li");
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        if (label !== null) swatch.style.background = this.colorOf(label);
        item.append(swatch, label === null ? "other labels" : label);
        item.dataset.label = label === null ? "" : label;
        item.title = label === null ? "labels past the first " + MAX_LANES : label;
        return item;
      }),
    );
    row.querySelector("canvas").style.height = labels.length ? `${(labels.length + 1) * LANE_PX}px` : "";
  }

  // Drawing -------------------------------------------------------------------------------------
  x(time, width) {
    return ((time - this.view.start) / this.span) * width;
  }

  draw() {
    this.drawWave();
    this.drawSpectrogram();
    this.drawRuler();
    for (const model of this.trackTags.keys()) this.drawTrack(model);
    this.moveCursor(this.position);
  }

  drawWave() {
    const { draw, width, height } = fit(this.wave);
    if (!this.audio) return;
    const rate = this.audio.sampleRate;
    draw.fillStyle = "#445";
    for (let x = 0; x < width; x++) {
      const from = Math.floor((this.view.start + (x / width) * this.span) * rate);
      const to = Math.floor((this.view.start + ((x + 1) / width) * this.span) * rate);
      const [low, high] = range(this.audio.getChannelData(0), this.summary, from, Math.max(to, from + 1));
      if (high < low) continue;
      const top = ((1 - high) / 2) * height;
      draw.fillRect(x, top, 1, Math.max(1, ((high - low) / 2) * height));
    }
  }

  drawSpectrogram() {
    const { draw, width, height } = fit(this.spec);
    if (!this.audio) return;
    const samples = this.audio.getChannelData(0);
    const rate = this.audio.sampleRate;
    const image = draw.createImageData(width, height);
    const window = hann(FFT);
    const re = new Float32Array(FFT), im = new Float32Array(FFT);
    for (let x = 0; x < width; x++) {
      const from = Math.floor((this.view.start + (x / width) * this.span) * rate);
      const to = Math.floor((this.view.start + ((x + 1) / width) * this.span) * rate);
      const centre = loudest(this.summary, from, to);
      for (let i = 0; i < FFT; i++) {
        const at = centre - FFT / 2 + i;
        re[i] = at >= 0 && at < samples.length ? samples[at] * window[i] : 0;
        im[i] = 0;
      }
      fft(re, im);
      for (let y = 0; y < height; y++) {
        const bin = Math.floor(((height - 1 - y) / height) * (FFT / 2));
        const db = 10 * Math.log10(re[bin] * re[bin] + im[bin] * im[bin] + 1e-10);
        const level = Math.min(Math.max((db + 90) / 90, 0), 1); // -90..0 dB
        const offset = (y * width + x) * 4;
        image.data[offset] = 255 * Math.min(1, level * 1.6);
        image.data[offset + 1] = 255 * Math.max(0, level * 1.6 - 0.6);
        image.data[offset + 2] = 90 * (1 - level) + 40;
        image.data[offset + 3] = 255;
      }
    }
    draw.putImageData(image, 0, 0);
  }

  drawRuler() {
    const { draw, width, height } = fit(this.ruler);
    const step = niceStep(this.span / Math.max(1, width / (90 * devicePixelRatio)));
    draw.fillStyle = "#333";
    draw.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
    for (let t = Math.ceil(this.view.start / step) * step; t <= this.view.end; t += step) {
      const x = this.x(t, width);
      draw.fillRect(x, 0, 1, height / 3);
      draw.fillText(clock(t, step), x + 3, height - 3);
    }
  }

  drawTrack(model) {
    this.layoutLanes(model);
    const canvas = this.tracks.querySelector(`.track[data-model="${CSS.escape(model)}"] canvas`);
    const { draw, width, height } = fit(canvas);
    const labels = this.shownLanes(model);
    const lane = height / (labels.length + 1); // the whole height while not split
    for (const tag of this.trackTags.get(model)) {
      if (tag.end < this.view.start || tag.start > this.view.end) continue;
      const left = this.x(tag.start, width);
      const size = Math.max(1, this.x(tag.end, width) - left);
      draw.fillStyle = this.colorOf(tag.label);
      draw.fillRect(left, 0, size, lane);
      if (labels.length) draw.fillRect(left, lane * (1 + this.laneOf(labels, tag.label)), size, lane);
    }
  }

  moveCursor(time) {
    this.position = time;
    const share = (time - this.view.start) / this.span;
    this.cursor.hidden = share < 0 || share > 1;
    this.cursor.style.left = `calc(var(--names) + (100% - var(--names)) * ${share})`;
    this.cursor.dataset.time = time;
  }
}

// Helpers ----------------------------------------------------------------------------------------
function fit(canvas) {
  const width = (canvas.width = Math.max(1, Math.round(canvas.clientWidth * devicePixelRatio)));
  const height = (canvas.height = Math.max(1, Math.round(canvas.clientHeight * devicePixelRatio)));
  const draw = canvas.getContext("2d", { willReadFrequently: true });
  draw.clearRect(0, 0, width, height);
  return { draw, width, height };
}

function summarize(samples) {
  const blocks = Math.ceil(samples.length / BLOCK);
  const low = new Float32Array(blocks), high = new Float32Array(blocks);
  for (let b = 0; b < blocks; b++) {
    let min = 1, max = -1;
    for (let i = b * BLOCK, end = Math.min(i + BLOCK, samples.length); i < end; i++) {
      const value = samples[i];
      if (value < min) min = value;
      if (value > max) max = value;
    }
    low[b] = min;
    high[b] = max;
  }
  return { low, high };
}

function range(samples, summary, from, to) {
  let min = 1, max = -1;
  to = Math.min(to, samples.length);
  let i = Math.max(from, 0);
  while (i < to) {
    if (i % BLOCK === 0 && i + BLOCK <= to) {
      min = Math.min(min, summary.low[i / BLOCK]);
      max = Math.max(max, summary.high[i / BLOCK]);
      i += BLOCK;
    } else {
      min = Math.min(min, samples[i]);
      max = Math.max(max, samples[i]);
      i++;
    }
  }
  return [min, max];
}

// The centre of the loudest block between two samples: a column wider than one FFT window shows
// its loudest window, so a 2-second phrase stays visible in a 2-hour view.
function loudest(summary, from, to) {
  let centre = Math.floor((from + to) / 2), best = -1;
  for (let b = Math.ceil(from / BLOCK); b < Math.floor(to / BLOCK); b++) {
    const swing = summary.high[b] - summary.low[b];
    if (swing > best) {
      best = swing;
      centre = b * BLOCK + BLOCK / 2;
    }
  }
  return centre;
}

function hann(size) {
  return Float32Array.from({ length: size }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / size));
}

// In-place radix-2 FFT (size a power of two).
function fft(re, im) {
  const n = re.length;
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      [re[i], re[j]] = [re[j], re[i]];
      [im[i], im[j]] = [im[j], im[i]];
    }
  }
  for (let size = 2; size <= n; size <<= 1) {
    const angle = (-2 * Math.PI) / size;
    for (let start = 0; start < n; start += size) {
      for (let k = 0; k < size / 2; k++) {
        const cos = Math.cos(angle * k), sin = Math.sin(angle * k);
        const a = start + k, b = a + size / 2;
        const tr = re[b] * cos - im[b] * sin, ti = re[b] * sin + im[b] * cos;
        re[b] = re[a] - tr;
        im[b] = im[a] - ti;
        re[a] += tr;
        im[a] += ti;
      }
    }
  }
}

function niceStep(seconds) {
  const steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  return steps.find((step) => step >= seconds) || 7200;
}

export function clock(seconds, step = 1) {
  const hours = Math.floor(seconds / 3600);
  const minutes = Math.floor((seconds % 3600) / 60);
  const rest = seconds % 60;
  const secs = step < 1 ? rest.toFixed(1).padStart(4, "0") : String(Math.floor(rest)).padStart(2, "0");
  const head = hours ? `${hours}:${String(minutes).padStart(2, "0")}` : String(minutes);
  return `${head}:${secs}`;
}
