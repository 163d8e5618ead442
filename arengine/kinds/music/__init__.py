"""The `music` kind: musicnn's network and log-mel (`network`), its recognizer and its label
parameters (`params`), tagged by the shared label tagger (`arengine/postprocess/labels.py`); its
declaration is `kind.py`."""
