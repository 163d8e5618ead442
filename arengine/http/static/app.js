// The arengine page: upload a recording, draw its waveform with the tags as regions, download.
"use strict";

const FORMATS = ["json", "csv", "txt", "raven", "rttm", "vtt", "srt"];
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const $ = (selector) => document.querySelector(selector);

function setStatus(text, error = false) {
  const status = $("#status");
  status.textContent = text;
  status.classList.toggle("error", error);
}

async function loadModels() {
  const response = await fetch("/v1/models");
  const body = await response.json();
  if (!response.ok) {
    setStatus(`${body.error.code}: ${body.error.message}`, true);
    return;
  }
  for (const model of body.models) {
    const option = new Option(`${model.name} (${model.kind})`, model.name);
    $("#model").append(option);
  }
}

async function recognize(file, model, format) {
  const body = new FormData();
  body.append("file", file);
  const query = new URLSearchParams({ model });
  if (format) query.set("format", format);
  return fetch(`/v1/recognize?${query}`, { method: "POST", body });
}

async function decode(file) {
  try {
    const context = new OfflineAudioContext(1, 1, 44100);
    return await context.decodeAudioData(await file.arrayBuffer());
  } catch {
    return null; // a codec this browser lacks: the regions are still drawn
  }
}

function drawWaveform(audio) {
  const canvas = $("#canvas");
  const width = (canvas.width = canvas.clientWidth * devicePixelRatio);
  const height = (canvas.height = canvas.clientHeight * devicePixelRatio);
  const draw = canvas.getContext("2d");
  draw.clearRect(0, 0, width, height);
  if (!audio) return;
  const samples = audio.getChannelData(0);
  const step = Math.max(1, Math.floor(samples.length / width));
  draw.fillStyle = "#445";
  for (let x = 0; x < width; x++) {
    let low = 1, high = -1;
    for (let i = x * step; i < Math.min((x + 1) * step, samples.length); i++) {
      low = Math.min(low, samples[i]);
      high = Math.max(high, samples[i]);
    }
    if (high < low) continue;
    const top = ((1 - high) / 2) * height;
    draw.fillRect(x, top, 1, Math.max(1, ((high - low) / 2) * height));
  }
}

function colorOf(labels, label) {
  if (!labels.has(label)) labels.set(label, COLORS[labels.size % COLORS.length]);
  return labels.get(label);
}

function drawTags(tags, duration) {
  const regions = $("#regions"), rows = $("#tags tbody"), legend = $("#legend");
  regions.replaceChildren();
  rows.replaceChildren();
  legend.replaceChildren();
  const labels = new Map();
  tags.forEach((tag, index) => {
    const color = colorOf(labels, tag.label);
    const region = document.createElement("div");
    region.className = "region";
    region.dataset.start = tag.start;
    region.dataset.end = tag.end;
    region.dataset.label = tag.label;
    region.title = `${tag.label} ${tag.start.toFixed(2)}–${tag.end.toFixed(2)} s`;
    region.style.left = `${(100 * tag.start) / duration}%`;
    region.style.width = `${(100 * (tag.end - tag.start)) / duration}%`;
    region.style.background = color;
    regions.append(region);
    const row = rows.insertRow();
    const cells = [index + 1, tag.start.toFixed(3), tag.end.toFixed(3), tag.label, tag.score.toFixed(3)];
    for (const cell of cells) row.insertCell().textContent = cell;
  });
  for (const [label, color] of labels) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = color;
    item.append(swatch, label);
    legend.append(item);
  }
}

function filenameOf(response, fallback) {
  const match = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  return match ? match[1] : fallback;
}

async function download(file, model, format) {
  setStatus(`Preparing ${format}…`);
  const response = await recognize(file, model, format);
  if (!response.ok) {
    const body = await response.json();
    setStatus(`${body.error.code}: ${body.error.message}`, true);
    return;
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = filenameOf(response, `recording.${format}`);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  setStatus(`Downloaded ${link.download}.`);
}

function showDownloads(file, model) {
  const box = $("#downloads");
  box.querySelectorAll("button").forEach((button) => button.remove());
  for (const format of FORMATS) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = format;
    button.dataset.format = format;
    button.addEventListener("click", () => download(file, model, format));
    box.append(button);
  }
}

async function onSubmit(event) {
  event.preventDefault();
  const file = $("#file").files[0];
  const model = $("#model").value;
  if (!file) return;
  $("#run").disabled = true;
  setStatus(`Recognizing ${file.name}…`);
  try {
    const [response, audio] = await Promise.all([recognize(file, model), decode(file)]);
    const body = await response.json();
    if (!response.ok) {
      setStatus(`${body.error.code}: ${body.error.message}`, true);
      return;
    }
    $("#view").hidden = false;
    drawWaveform(audio);
    drawTags(body.tags, body.audio.duration_s);
    showDownloads(file, model);
    const seconds = body.timings.total_s.toFixed(2);
    setStatus(`${body.tags.length} tags in ${body.audio.duration_s.toFixed(1)} s of audio (${seconds} s).`);
    document.body.dataset.done = "true";
  } catch (error) {
    setStatus(String(error), true);
  } finally {
    $("#run").disabled = false;
  }
}

$("#form").addEventListener("submit", onSubmit);
loadModels();
