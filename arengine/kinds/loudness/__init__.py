"""The `loudness` kind: no network. The level of every window in dBFS (`level.py`), its
recognizer, and the trigger that tags where the level rises above a running background or an
absolute level (`tagger.py`); its declaration is `kind.py`. A loudness model may also gate a
request's other models, which then skip the segments in which it hears nothing loud (`gate.py`)."""
