"""The `classifier` kind: a user's own network over log-mel windows: the runtimes its file picks
(`runtimes`) and its recognizer; tagged by the shared label tagger
(`arengine/postprocess/labels.py`); its declaration is `kind.py`."""
