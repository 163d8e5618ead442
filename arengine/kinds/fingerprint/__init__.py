"""The `fingerprint` kind: landmark hashes and their matching (`landmarks`), the SQLite reference
library (`library`) and adding a recording to it (`references`), the recognizer, and the
occurrence tagger and its parameters (`tagger`); its declaration is `kind.py`."""
