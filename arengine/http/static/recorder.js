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
