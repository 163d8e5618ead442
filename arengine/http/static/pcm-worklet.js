// The microphone's samples as they come, for `WS /v1/listen`: the first channel, as Float32Array
// blocks of about 100 ms posted to the page (128-frame render quanta would be ~375 messages a
// second at 48 kHz).
"use strict";

class PcmTap extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Float32Array(Math.round(sampleRate / 10));
    this.filled = 0;
    this.port.onmessage = () => this.flush(true); // the page asks for the rest before it ends
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    let at = 0;
    while (at < channel.length) {
      const count = Math.min(channel.length - at, this.block.length - this.filled);
      this.block.set(channel.subarray(at, at + count), this.filled);
      this.filled += count;
      at += count;
      if (this.filled === this.block.length) this.flush();
    }
    return true;
  }

  flush(last = false) {
    const block = this.block.slice(0, this.filled);
    this.filled = 0;
    this.port.postMessage({ block, last }, [block.buffer]);
  }
}

registerProcessor("pcm-tap", PcmTap);
