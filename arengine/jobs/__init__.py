"""Jobs: recognitions that outlive their connection and the process (`store.py`, `runner.py`).

May import: arengine, engine, errors, kinds, models, postprocess, service, settings, system,
types.
"""
