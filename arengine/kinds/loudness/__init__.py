"""The `loudness` kind: no network. The level of every window in dBFS (`level.py`), its
recognizer, and the trigger that tags where the level rises above a running background or an
absolute level (`tagger.py`); its declaration is `kind.py`."""
