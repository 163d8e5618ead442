"""The engine a process serves with (`engine`): the scheduling core (`arengine/engine/`) with the
loaded models and the settings, building each request's strategies: its models' taggers with
the request's parameters and the recording's time (`arengine/models/tagging.py`), a live
stream's segment plans, taggers and tag order (`arengine/live/plans.py`).

May import: audio, engine, errors, kinds, live, models, settings, system.
"""
