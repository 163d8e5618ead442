"""The `events` kind: YAMNet's network (`network`), its recognizer and its label parameters
(`params`), tagged by the shared label tagger (`arengine/postprocess/labels.py`); its
declaration is `kind.py`."""
