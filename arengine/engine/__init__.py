"""The engine: one pool of threads (`pool`) running every request's tasks, a request as a state
machine handing them out (`job`), one model's share of it (`model_run`), the merge of several
models' tags (`merge`) and admission (`admission`).

May import: audio, errors, kinds, live, models, postprocess, settings, system, types.
(The engine still plans live streams and recording-time defaults itself; they are to plug in
from outside, and then live, kinds and models leave this list.)
"""
