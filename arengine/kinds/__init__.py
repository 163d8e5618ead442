"""The model kinds, a folder each (`speech`, `pitch`, `notes`, `classifier`, `music`, `events`,
`birds`, `fingerprint`, `loudness`): its network, recognizer, parameters, tagger and tag fields,
and its declaration (`<kind>/kind.py`), registered once in `catalog.py`. What every kind shares:
the `Recognizer` base (`base.py`), the `Kind` declaration (`declaration.py`, no torch), a tag
field's declaration (`fields.py`), manifests (`manifest.py`), log-mel features (`mel.py`) and the
label kinds' manifest reading (`label_manifest.py`).

May import: audio, db (the fingerprint libraries' engines), errors, postprocess, settings (its
fixed limits), types.
"""
