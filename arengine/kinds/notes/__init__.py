"""The `notes` kind: basic-pitch's network (`network`), its recognizer on basic-pitch's window
grid, the note tagger and its parameters (`tagger`); its declaration is `kind.py`."""
