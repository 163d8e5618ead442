"""The `speech` kind: silero-vad's network rewritten stateless (`network`), its recognizer, the
speech tagger and its parameters (`tagger`); its declaration is `kind.py`."""
