// Recording from the microphone: MediaRecorder, WebM with Opus, handed over as a File.
"use strict";

const TYPE = "audio/webm;codecs=opus";

export class MicRecorder {
  constructor() {
    this.recorder = null;
    this.chunks = [];
    this.started = 0;
  }

  get recording() {
    return this.recorder !== null && this.recorder.state === "recording";
  }

  async start() {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const options = MediaRecorder.isTypeSupported(TYPE) ? { mimeType: TYPE } : {};
    this.recorder = new MediaRecorder(stream, options);
    this.chunks = [];
    this.recorder.addEventListener("dataavailable", (event) => {
      if (event.data.size) this.chunks.push(event.data);
    });
    this.recorder.start(250); // a chunk every 250 ms: a long take is not one huge buffer
    this.started = performance.now();
  }

  // Stops, releases the microphone, and resolves with the recording as a File.
  stop() {
    const recorder = this.recorder;
    return new Promise((resolve) => {
      recorder.addEventListener("stop", () => {
        recorder.stream.getTracks().forEach((track) => track.stop());
        const type = recorder.mimeType || "audio/webm";
        const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
        resolve(new File(this.chunks, `microphone-${stamp}.webm`, { type }));
        this.recorder = null;
      }, { once: true });
      recorder.stop();
    });
  }

  seconds() {
    return this.recording ? (performance.now() - this.started) / 1000 : 0;
  }
}

// What a Listen keeps to play and draw once it stops: its first 10 minutes (16-bit, about 1 MiB
// a minute at 16 kHz, 5.5 at 48 kHz); the tags of a longer one are still all drawn.
const KEEP_S = 600;

// Listening from the microphone: raw float samples (an AudioWorklet) at the AudioContext's rate,
// mono, handed to `onBlock(Float32Array)` about every 100 ms as they are captured.
export class MicStream {
  constructor(onBlock) {
    this.onBlock = onBlock;
    this.context = null;
    this.started = 0;
    this.kept = [];
    this.frames = 0;
  }

  get sampleRate() {
    return this.context ? this.context.sampleRate : 0;
  }

  async start() {
    const stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    this.context = new AudioContext();
    try {
      await this.context.audioWorklet.addModule("/static/pcm-worklet.js");
    } catch (error) {
      stream.getTracks().forEach((track) => track.stop());
      await this.context.close();
      throw error;
    }
    this.source = this.context.createMediaStreamSource(stream);
    this.tap = new AudioWorkletNode(this.context, "pcm-tap", { numberOfOutputs: 0 });
    this.tap.port.onmessage = ({ data }) => {
      if (data.block.length) this.keep(data.block);
      if (data.block.length) this.onBlock(data.block);
      if (data.last) this.finished();
    };
    this.source.connect(this.tap);
    await this.context.resume();
    this.started = performance.now();
  }

  // Stops capturing, hands over the samples still in the worklet, releases the microphone.
  stop() {
    return new Promise((resolve) => {
      this.finished = resolve;
      this.source.disconnect();
      this.source.mediaStream.getTracks().forEach((track) => track.stop());
      this.tap.port.postMessage("flush");
    }).then(() => {
      this.rate = this.context.sampleRate;
      this.context.close();
      this.context = null;
    });
  }

  keep(block) {
    this.frames += block.length;
    if (this.frames <= KEEP_S * this.context.sampleRate) this.kept.push(Int16Array.from(block, pcm16));
    else this.kept = null; // too long to keep whole: nothing to play, the tags stay
  }

  // What was heard as a 16-bit WAV File, once stopped; null past KEEP_S.
  recording(name) {
    if (!this.kept) return null;
    const bytes = 2 * this.kept.reduce((sum, block) => sum + block.length, 0);
    const head = new DataView(new ArrayBuffer(44));
    const text = (at, value) => [...value].forEach((c, i) => head.setUint8(at + i, c.charCodeAt(0)));
    text(0, "RIFF");
    head.setUint32(4, 36 + bytes, true);
    text(8, "WAVEfmt ");
    head.setUint32(16, 16, true);
    head.setUint16(20, 1, true); // PCM
    head.setUint16(22, 1, true); // mono
    head.setUint32(24, this.rate, true);
    head.setUint32(28, 2 * this.rate, true);
    head.setUint16(32, 2, true);
    head.setUint16(34, 16, true);
    text(36, "data");
    head.setUint32(40, bytes, true);
    return new File([head, ...this.kept], name, { type: "audio/wav" });
  }

  seconds() {
    return this.context ? (performance.now() - this.started) / 1000 : 0;
  }
}

function pcm16(sample) {
  return Math.max(-32768, Math.min(32767, Math.round(sample * 32767)));
}
