"""Jobs: recognitions that outlive their connection and the process (`store.py`, `runner.py`).

May import: engine, errors, kinds, models, postprocess, types.
"""
