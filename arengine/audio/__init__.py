"""Stage 1 and the first half of stage 2: from an uploaded file to each model's segments.

Probe and validate the upload (`sniff`, `validation`), decode it block by block (`decode` with
libsndfile, `ffmpeg` with FFmpeg's libraries, `lanes` for several offsets at once, `arrival` for a
WAV still uploading), resample once per model rate (`tee`) and cut segments (`segments`).
"""
