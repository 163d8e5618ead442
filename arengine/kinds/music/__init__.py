"""The `music` kind: musicnn's network and log-mel (`network`) and its recognizer; tagged by the
shared label tagger; its declaration is `kind.py`."""
