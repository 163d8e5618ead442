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

// Listening from the microphone: raw float samples (an AudioWorklet) at the AudioContext's rate,
// mono, handed to `onBlock(Float32Array)` about every 100 ms as they are captured.
export class MicStream {
  constructor(onBlock) {
    this.onBlock = onBlock;
    this.context = null;
    this.started = 0;
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
      this.context.close();
      this.context = null;
    });
  }

  seconds() {
    return this.context ? (performance.now() - this.started) / 1000 : 0;
  }
}
