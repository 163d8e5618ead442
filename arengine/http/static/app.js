// The arengine page: pick or record a recording, run one or more models on it (one streamed
// request for all of them, decoded once on the server; one track each), see and hear the tags,
// download them in any format; or listen to the microphone, the tracks filling as tags arrive.
"use strict";

import { ApiError, LiveStream, apiKey, download, getJson, setApiKey, streamTags } from "./api.js";
import { MicRecorder, MicStream } from "./recorder.js";
import { Timeline, clock } from "./timeline.js";

const $ = (selector) => document.querySelector(selector);
const NOTE = /^[A-G]#?-?\d+$/;
const BIG_FILE = 50 * 1024 * 1024; // above this, decode for drawing at 8 kHz to bound memory

const state = { file: null, models: [], formats: [], controller: null, stopAt: null, progress: new Map() };
const player = $("#player");
const mic = new MicRecorder();
const timeline = new Timeline($("#timeline"), seek, (model, tag) => playTag(tag));

function setStatus(text, error = false) {
  $("#status").textContent = text;
  $("#status").classList.toggle("error", error);
}

function setState(name) {
  document.body.dataset.state = name; // tests and scripts wait on this
}

// Models, formats and the API key --------------------------------------------------------------
async function loadServer() {
  try {
    const [models, formats] = await Promise.all([getJson("/v1/models"), getJson("/v1/formats")]);
    state.models = models.models;
    state.formats = formats.formats;
    showModels(models.default);
    setStatus(state.file ? "Ready." : "Choose or record a recording.");
  } catch (error) {
    const hint = error instanceof ApiError && error.status === 401 ? " Enter the API key." : "";
    setStatus(String(error.message || error) + hint, true);
  }
}

function showModels(defaultModel) {
  const box = $("#models");
  box.querySelectorAll("label").forEach((label) => label.remove());
  const fallback = state.models.length ? state.models[0].name : null;
  for (const model of state.models) {
    const label = document.createElement("label");
    const box_ = document.createElement("input");
    box_.type = "checkbox";
    box_.value = model.name;
    box_.checked = model.name === (defaultModel || fallback);
    label.append(box_, `${model.name} (${model.kind})`);
    box.append(label);
    if (model.profiles && model.profiles.length) box.append(profileChoice(model));
  }
  document.body.dataset.models = state.models.length;
}

// A label model's named profiles (events: safety, wildlife, ambient, which leaves speech to the
// speech model): one select beside its box; the chosen one goes into the query as `profile`.
function profileChoice(model) {
  const label = document.createElement("label");
  const select = document.createElement("select");
  select.dataset.profileFor = model.name;
  for (const name of ["", ...model.profiles]) {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name || "all labels";
    select.append(option);
  }
  label.append(`${model.name} profile `, select);
  return label;
}

function chosenProfile(models) {
  const picked = models
    .map((model) => document.querySelector(`select[data-profile-for="${CSS.escape(model)}"]`))
    .filter((select) => select && select.value);
  return picked.length ? { profile: picked[0].value } : {};
}

function chosenModels() {
  return [...document.querySelectorAll("#models input:checked")].map((input) => input.value);
}

// Recognition ----------------------------------------------------------------------------------
async function decodeForDrawing(file) {
  try {
    const rate = file.size > BIG_FILE ? 8000 : 22050;
    const context = new OfflineAudioContext(1, 1, rate);
    return await context.decodeAudioData(await file.arrayBuffer());
  } catch {
    return null; // a codec this browser lacks: the tags are still drawn
  }
}

async function recognize() {
  const file = state.file;
  const models = chosenModels();
  if (!file) return setStatus("Choose or record a recording first.", true);
  if (!models.length) return setStatus("Choose at least one model.", true);
  state.controller = new AbortController();
  const signal = state.controller.signal;
  startView(file, models);
  setRunning(true);
  setStatus(`Recognizing ${file.name} with ${models.join(", ")}…`);
  const drawing = decodeForDrawing(file).then((audio) => {
    timeline.reset(audio ? audio.duration : timeline.duration, audio);
    addTracks(models);
    state.tagsByModel.forEach((tags, model) => timeline.addTags(model, tags));
    timeline.draw();
  });
  const [outcome] = await Promise.allSettled([runModels(file, models, signal)]);
  await drawing;
  setRunning(false);
  finish(models, models.map(() => outcome), signal.aborted);
}

// `file`: the recording; null while listening (nothing to play or download until the summary).
function startView(file, models) {
  if (file) player.src = URL.createObjectURL(file);
  else player.removeAttribute("src");
  $("#view").hidden = false;
  $("#tags tbody").replaceChildren();
  $("#legend").replaceChildren();
  state.tagsByModel = new Map(models.map((model) => [model, []]));
  state.progress = new Map(models.map((model) => [model, 0]));
  state.summary = null;
  timeline.reset(0, null);
  addTracks(models);
  if (file) showDownloads(file, models);
  else $("#downloads").replaceChildren();
  setState(file ? "running" : "listening");
}

// A track per model; a model of many labels (events, birds, music) gets a lane per label, so the
// labels it reports at once (or the groups its profile reports) read apart, related labels side
// by side. Notes stay one lane.
function addTracks(models) {
  for (const model of models) {
    timeline.addTrack(model, { byLabel: !isNoteModel(model), labels: labelsOf(model) });
  }
}

function labelsOf(model) {
  return (state.models.find((m) => m.name === model) || { labels: [] }).labels;
}

function isNoteModel(model) {
  const labels = labelsOf(model);
  return labels.length > 0 && labels.every((label) => NOTE.test(label));
}

// One request for every chosen model (`model=a,b`): the server decodes the file once and tags
// each model's tags with `model`; a one-model answer has none, its tags are that model's.
async function runModels(file, models, signal) {
  const summary = await streamTags(file, models.join(","), signal, {
    onTags: (tags) => {
      takeTags(models, tags).forEach(([model, own]) => {
        bumpProgress(model, own[own.length - 1].end, timeline.duration);
      });
    },
    onProgress: (done, duration) => {
      timeline.setDuration(duration);
      models.forEach((model) => bumpProgress(model, done, duration));
    },
  }, chosenProfile(models));
  state.summary = summary;
  const duration = summary.audio.duration_s;
  timeline.setDuration(duration);
  models.forEach((model) => bumpProgress(model, duration, duration));
  return summary;
}

// Tags of one stream for all `models`, each to its model's track and rows: [model, its tags].
function takeTags(models, tags) {
  const taken = [];
  for (const model of models) {
    const own = tags.filter((tag) => (tag.model || models[0]) === model);
    if (!own.length) continue;
    state.tagsByModel.get(model).push(...own);
    timeline.addTags(model, own);
    addRows(model, own);
    taken.push([model, own]);
  }
  showLegend();
  return taken;
}

function bumpProgress(model, done, duration) {
  if (!duration) return;
  state.progress.set(model, Math.max(state.progress.get(model) || 0, Math.min(done / duration, 1)));
  const shares = [...state.progress.values()];
  const share = shares.reduce((a, b) => a + b, 0) / shares.length;
  $("#progress").value = share;
  $("#progress-text").textContent = `${Math.round(100 * share)} % of ${clock(duration)}`;
}

function finish(models, outcomes, cancelled) {
  timeline.flush();
  const failed = outcomes
    .map((outcome, index) => [models[index], outcome])
    .filter(([, outcome]) => outcome.status === "rejected");
  for (const [model, outcome] of failed) {
    const name = document.querySelector(`.track[data-model="${CSS.escape(model)}"] .track-name`);
    if (name) {
      name.classList.add("error");
      name.title = String(outcome.reason.message || outcome.reason);
    }
  }
  const count = [...state.tagsByModel.values()].reduce((sum, tags) => sum + tags.length, 0);
  if (cancelled) {
    setStatus(`Cancelled; ${count} tags so far.`);
    setState("cancelled");
  } else if (failed.length) {
    // One request for all the models: one reason, however many tracks it failed.
    const reasons = new Set(failed.map(([, outcome]) => String(outcome.reason.message || outcome.reason)));
    setStatus([...reasons].join("; "), true);
    setState(failed.length === models.length ? "failed" : "done");
  } else {
    setStatus(`${count} tags in ${clock(timeline.duration)} of audio.`);
    setState("done");
  }
}

function setRunning(running) {
  $("#run").disabled = running;
  $("#record").disabled = running;
  $("#listen").disabled = running;
  $("#cancel").disabled = !running;
  $("#progress-row").hidden = !running && $("#progress").value >= 1;
  if (running) $("#progress").value = 0;
}

function cancel() {
  if (state.controller) state.controller.abort(); // closes the connections: the server cancels
}

// The table and the legend -----------------------------------------------------------------------
function addRows(model, tags) {
  const body = $("#tags tbody");
  const offset = state.tagsByModel.get(model).length - tags.length;
  tags.forEach((tag, index) => {
    const row = document.createElement("tr");
    row.dataset.model = model;
    row.dataset.start = tag.start;
    row.dataset.end = tag.end;
    const cells = [model, offset + index + 1, tag.start.toFixed(3), tag.end.toFixed(3), tag.label, tag.score.toFixed(3)];
    for (const cell of cells) row.insertCell().textContent = cell;
    row.addEventListener("click", () => {
      if (tag.start < timeline.view.start || tag.end > timeline.view.end) {
        const pad = Math.max(timeline.span, tag.end - tag.start) / 2;
        timeline.show((tag.start + tag.end) / 2 - pad, (tag.start + tag.end) / 2 + pad);
      }
      playTag(tag);
    });
    body.insertBefore(row, body.rows[firstRowAfter(body.rows, tag.start)] || null);
  });
}

// Rows stay in timestamp order across models (each model's stream is in order, not their mix).
function firstRowAfter(rows, start) {
  let low = 0;
  let high = rows.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (Number(rows[middle].dataset.start) <= start) low = middle + 1;
    else high = middle;
  }
  return low;
}

function showLegend() {
  const legend = $("#legend");
  if (legend.childElementCount === timeline.labels.size) return;
  legend.replaceChildren();
  for (const [label, color] of timeline.labels) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = color;
    item.append(swatch, label);
    legend.append(item);
  }
}

// Downloads: one format menu per model, the formats from GET /v1/formats -------------------------
function showDownloads(file, models) {
  const box = $("#downloads");
  box.replaceChildren("Download:");
  for (const model of models) {
    const notes = isNoteModel(model);
    const select = document.createElement("select");
    select.dataset.model = model;
    for (const format of state.formats.filter((f) => notes || !f.notes_only)) {
      select.append(new Option(`${format.name} (.${format.extension})`, format.name));
    }
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = `${model} ⤓`;
    button.dataset.model = model;
    button.addEventListener("click", () => save(file, model, select.value));
    const group = document.createElement("span");
    group.append(select, button);
    box.append(group);
  }
}

async function save(file, model, format) {
  setStatus(`Preparing ${model} as ${format}…`);
  try {
    const { blob, name } = await download(file, model, format, resultOf(model));
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
    setStatus(`Downloaded ${name}.`);
  } catch (error) {
    setStatus(String(error.message || error), true);
  }
}

// One model's tags as `POST /v1/recognize` would have answered them, once the run has its summary.
function resultOf(model) {
  const summary = state.summary;
  if (!summary) return null;
  const timings = (summary.model_timings || {})[model] || summary.timings;
  const tags = state.tagsByModel.get(model).map(({ model: _, ...tag }) => tag);
  return { model, audio: summary.audio, timings, tags };
}

// Playback and the cursor ----------------------------------------------------------------------
function seek(time) {
  state.stopAt = null;
  player.currentTime = time;
  timeline.moveCursor(time);
  showClock();
}

function playTag(tag) {
  document.querySelectorAll("#tags tr.playing").forEach((row) => row.classList.remove("playing"));
  const row = document.querySelector(`#tags tr[data-start="${tag.start}"][data-end="${tag.end}"]`);
  if (row) row.classList.add("playing");
  player.currentTime = tag.start;
  state.stopAt = tag.end;
  document.body.dataset.playing = `${tag.start}-${tag.end}`;
  timeline.moveCursor(tag.start);
  player.play().catch(() => {}); // a browser refusing autoplay still moves the cursor
}

function tick() {
  if (state.stopAt !== null && player.currentTime >= state.stopAt) {
    player.pause();
    player.currentTime = state.stopAt;
    state.stopAt = null;
  }
  if (!player.paused || timeline.position !== player.currentTime) {
    timeline.moveCursor(player.currentTime);
    showClock();
  }
  $("#play").textContent = player.paused ? "▶ Play" : "❚❚ Pause";
  requestAnimationFrame(tick);
}

function showClock() {
  $("#clock").textContent = clock(player.currentTime, 0.1);
}

// Microphone -----------------------------------------------------------------------------------
async function startRecording() {
  try {
    await mic.start();
  } catch (error) {
    return setStatus(`Microphone: ${error.message || error}`, true);
  }
  $("#record").hidden = true;
  $("#stop-recording").hidden = false;
  setStatus("Recording from the microphone…");
  const timer = setInterval(() => {
    if (!mic.recording) return clearInterval(timer);
    $("#mic-time").textContent = clock(mic.seconds(), 0.1);
  }, 100);
}

async function stopRecording() {
  const file = await mic.stop();
  $("#record").hidden = false;
  $("#stop-recording").hidden = true;
  state.file = file;
  $("#file").value = "";
  $("#mic-time").textContent = `${file.name} (${Math.round(file.size / 1024)} KiB)`;
  recognize(); // sent as recorded: WebM with Opus
}

// Listening: the microphone streamed to WS /v1/listen ------------------------------------------
// The samples go out as f32le mono at the AudioContext's rate (the server resamples for each
// model); each tag is drawn as it arrives and the timeline grows with the audio received.
async function startListening() {
  const models = chosenModels();
  if (!models.length) return setStatus("Choose at least one model.", true);
  const held = []; // samples captured before the socket exists
  let stream = null;
  const live = new MicStream((block) => (stream ? stream.send(block) : held.push(block)));
  try {
    await live.start();
  } catch (error) {
    return setStatus(`Microphone: ${error.message || error}`, true);
  }
  startView(null, models);
  stream = new LiveStream(models.join(","), live.sampleRate, {
    onTags: (tags) => {
      takeTags(models, tags);
      timeline.grow(Math.max(...tags.map((tag) => tag.end)));
    },
    onProgress: (progress) => showLiveProgress(progress),
  }, chosenProfile(models));
  held.forEach((block) => stream.send(block));
  let cancelled = false;
  state.live = { mic: live, stream };
  state.controller = { abort: () => { cancelled = true; stream.close(); } };
  setRunning(true);
  $("#progress-text").textContent = "";
  $("#listen").hidden = true;
  $("#stop-listening").hidden = false;
  setStatus(`Listening with ${models.join(", ")}…`);
  const timer = setInterval(() => {
    $("#mic-time").textContent = `heard ${clock(live.seconds(), 0.1)}`;
  }, 100);
  const [outcome] = await Promise.allSettled([stream.summary]);
  clearInterval(timer);
  if (live.context) await live.stop(); // the stream failed or was cancelled while listening
  state.live = null;
  $("#listen").hidden = false;
  $("#stop-listening").hidden = true;
  if (outcome.status === "fulfilled") {
    const heard = outcome.value.audio.duration_s;
    state.summary = outcome.value;
    $("#progress").value = 1;
    $("#progress-text").textContent = `${clock(heard)} tagged of ${clock(heard)} heard`;
    $("#mic-time").textContent = `heard ${clock(heard, 0.1)}`;
    timeline.grow(heard);
    const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
    const name = `microphone-${stamp}.wav`;
    const file = live.recording(name);
    showDownloads(file || { name }, models); // the downloads are written from the tags held
    if (file) await showHeard(file, models);
  }
  setRunning(false);
  finish(models, models.map(() => outcome), cancelled);
}

// What was heard, drawn and playable as a chosen file's recording is; the tags drawn again.
async function showHeard(file, models) {
  state.file = file;
  $("#file").value = "";
  player.src = URL.createObjectURL(file);
  const audio = await decodeForDrawing(file);
  if (!audio) return;
  timeline.reset(audio.duration, audio);
  addTracks(models);
  state.tagsByModel.forEach((tags, model) => timeline.addTags(model, tags));
  timeline.draw();
}

// Stop: the samples still in the worklet go out, then {"end": true}; the summary ends it.
async function stopListening() {
  const live = state.live;
  if (!live) return;
  $("#stop-listening").disabled = true;
  setStatus("Finishing the last tags…");
  await live.mic.stop();
  live.stream.end();
  $("#stop-listening").disabled = false;
}

function showLiveProgress({ audio_s: done, received_s: received }) {
  timeline.grow(received);
  $("#progress").value = received ? Math.min(done / received, 1) : 0;
  $("#progress-text").textContent = `${clock(done)} tagged of ${clock(received)} heard`;
}

// Wiring ---------------------------------------------------------------------------------------
$("#file").required = false; // a microphone recording stands in for a file
$("#form").addEventListener("submit", (event) => {
  event.preventDefault();
  recognize();
});
$("#file").addEventListener("change", () => {
  state.file = $("#file").files[0] || null;
  $("#mic-time").textContent = "";
});
$("#cancel").addEventListener("click", cancel);
$("#record").addEventListener("click", startRecording);
$("#stop-recording").addEventListener("click", stopRecording);
$("#listen").addEventListener("click", startListening);
$("#stop-listening").addEventListener("click", stopListening);
$("#key").value = apiKey();
$("#key").addEventListener("change", () => {
  setApiKey($("#key").value.trim());
  loadServer();
});
$("#play").addEventListener("click", () => {
  state.stopAt = null;
  if (player.paused) player.play().catch(() => {});
  else player.pause();
});
$("#zoom-in").addEventListener("click", () => timeline.zoom(0.5, timeline.position));
$("#zoom-out").addEventListener("click", () => timeline.zoom(2, timeline.position));
$("#zoom-fit").addEventListener("click", () => timeline.show(0, timeline.duration));
$("#scroll").addEventListener("input", () => timeline.scrollTo($("#scroll").value / 1000));
$("#timeline").addEventListener("viewchange", () => {
  const room = timeline.duration - timeline.span;
  $("#scroll").value = room > 0 ? (1000 * timeline.view.start) / room : 0;
  $("#scroll").disabled = room <= 0;
});
window.addEventListener("resize", () => timeline.draw());
requestAnimationFrame(tick);
loadServer();
window.arengine = { timeline, state, player }; // for the console and the browser tests
