"""Jobs: recognitions that outlive their connection and the process (`store.py`, `runner.py`).

May import: arengine, db, engine, errors, kinds, models, postprocess, service, settings, system,
types.
"""
