"""The loaded models: the registry that reads each model folder's manifest, builds its kind's
recognizer and warms it up (`registry`). The kinds themselves are `arengine/kinds/`; the
repository's `models/` folder (manifests, vendored weights, cards) is installed as
`arengine.models.builtin`.

May import: audio, errors, kinds, postprocess.
"""
