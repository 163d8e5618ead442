"""The `events` kind: YAMNet's network (`network`) and its recognizer; tagged by the shared label
tagger; its declaration is `kind.py`."""
