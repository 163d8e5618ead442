"""The `pitch` kind: CREPE tiny (`network`), its recognizer, the note tagger of a pitch track and
its parameters (`tagger`); its declaration is `kind.py`."""
