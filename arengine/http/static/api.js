// The server's API as the page uses it: the API key (this browser session only), JSON calls,
// and the NDJSON tag stream of POST /v1/recognize.
"use strict";

const KEY = "arengine.apiKey";

export function apiKey() {
  return sessionStorage.getItem(KEY) || "";
}

export function setApiKey(value) {
  // sessionStorage: the key is gone when the tab closes and never reaches localStorage or a cookie.
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

async function errorOf(response) {
  try {
    const body = await response.json();
    return new ApiError(response.status, body.error.code, body.error.message);
  } catch {
    return new ApiError(response.status, "http_" + response.status, response.statusText);
  }
}

export async function getJson(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

function upload(file, params, signal, accept) {
  const body = new FormData();
  body.append("file", file);
  const query = new URLSearchParams(params);
  return fetch(`/v1/recognize?${query}`, {
    method: "POST", body, signal, headers: headers(accept ? { Accept: accept } : {}),
  });
}

// Streams one recognition: calls onTags(tags), onProgress(audio_s, duration_s) as lines arrive;
// resolves with the summary. Aborting `signal` closes the connection, which cancels the job.
export async function streamTags(file, model, signal, { onTags, onProgress }, extra = {}) {
  const params = { model, progress: "true", ...extra };
  const response = await upload(file, params, signal, "application/x-ndjson");
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += value;
    const lines = pending.split("\n");
    pending = lines.pop();
    let tags = [];
    for (const line of lines.filter((text) => text.trim())) {
      const item = JSON.parse(line);
      if (item.start !== undefined) {
        tags.push(item);
        continue;
      }
      if (tags.length) onTags(tags); // the tags before a summary or error line count too
      tags = [];
      if (item.summary) return item.summary;
      if (item.error) throw new ApiError(200, item.error.code, item.error.message);
      if (item.progress) onProgress(item.progress.audio_s, item.progress.duration_s);
    }
    if (tags.length) onTags(tags);
  }
  throw new ApiError(0, "stream_ended", "the server closed the stream before its summary");
}

// One format of a model's tags as a file: the tags the page holds, written by POST /v1/render
// (the recording is not sent again); before a run has its summary, by recognizing the file again.
export async function download(file, model, format, result) {
  const response = result
    ? await fetch(`/v1/render?${new URLSearchParams({ format, name: file.name })}`, {
        method: "POST", body: JSON.stringify(result),
        headers: headers({ "Content-Type": "application/json" }),
      })
    : await upload(file, { model, format });
  if (!response.ok) throw await errorOf(response);
  const match = /filename="([^"]+)"/.exec(response.headers.get("Content-Disposition") || "");
  return { blob: await response.blob(), name: match ? match[1] : `recording.${format}` };
}

// A live stream to `WS /v1/listen`: `send(Float32Array)` mono samples at `sampleRate`, then
// `end()`; each message back is one line of the NDJSON stream, handled as streamTags does.
// `summary` resolves with the summary, or rejects with the error line or the close's reason.
// A WebSocket cannot send an Authorization header: the key goes as the subprotocol
// `arengine.key.<base64url>` beside `arengine`, which the server names back (arengine/http/auth.py).
export class LiveStream {
  constructor(model, sampleRate, { onTags, onProgress }, extra = {}) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const query = new URLSearchParams({ model, ...extra });
    const key = apiKey();
    const protocols = key ? ["arengine", `arengine.key.${base64url(key)}`] : [];
    this.socket = new WebSocket(`${scheme}//${location.host}/v1/listen?${query}`, protocols);
    this.socket.binaryType = "arraybuffer";
    this.pending = []; // audio captured while the handshake runs
    this.ended = false;
    this.socket.addEventListener("open", () => {
      this.socket.send(JSON.stringify({ format: "f32le", sample_rate: sampleRate, channels: 1 }));
      this.pending.forEach((samples) => this.socket.send(samples.buffer));
      this.pending = null;
      if (this.ended) this.end();
    }, { once: true });
    this.summary = new Promise((resolve, reject) => {
      this.socket.addEventListener("message", ({ data }) => {
        const item = JSON.parse(data);
        if (item.start !== undefined) onTags([item]);
        else if (item.summary) resolve(item.summary);
        else if (item.error) reject(new ApiError(200, item.error.code, item.error.message));
        else if (item.progress) onProgress(item.progress);
      });
      this.socket.addEventListener("close", (event) => {
        if (this.pending) {
          // Refused at the handshake: a browser does not say why (401, 403, 400).
          reject(new ApiError(0, "listen_refused", "the server refused the stream (the API key?)"));
        } else {
          reject(new ApiError(0, event.reason || "stream_ended",
            `the server closed the stream (${event.code}) before its summary`));
        }
      });
    });
    this.summary.catch(() => {}); // the caller awaits it; an early failure is not unhandled
  }

  send(samples) {
    // Little-endian on every platform a browser runs on, as f32le asks.
    if (this.pending) this.pending.push(samples);
    else if (this.socket.readyState === WebSocket.OPEN) this.socket.send(samples.buffer);
  }

  end() {
    this.ended = true;
    if (!this.pending && this.socket.readyState === WebSocket.OPEN) {
      this.socket.send(JSON.stringify({ end: true }));
    }
  }

  close() {
    this.socket.close();
  }
}

function base64url(text) {
  const bytes = new TextEncoder().encode(text);
  const binary = Array.from(bytes, (byte) => String.fromCharCode(byte)).join("");
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
