"""Stage 1 and the first half of stage 2: from an uploaded file to each model's segments.

Every input format is declared once (`containers`). Probe and validate the upload (`sniff`,
`validation`), decode it block by block (`decode` with libsndfile, `ffmpeg` with FFmpeg, `child`
FFmpeg's formats in a forked child, `parts` a long seekable file in parts by a child each, `spans`
one part's chain from a seek, `arrival` for a WAV still uploading, `wav` for where a WAV's frames
lie), resample once per model rate (`tee`) and cut segments (`segments`). The engine asks
`source` for one segment source per model.
May import: errors, settings, types.
"""
