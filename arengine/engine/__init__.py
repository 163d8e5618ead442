"""The engine, a core that schedules and nothing else: one pool of threads (`pool`) running
every request's tasks, a request as a state machine handing them out (`request`), one
model's share of it (`model_run`), the merge of several models' tags (`merge`), admission
(`admission`), and what plugs in from outside (`hooks`: the models it runs, each request's
tagging and tag order; `observer`: metrics and a job's kept scores).

It names no kind, no live stream, no durable job and no setting: those who build a request
(`arengine/service/`, `arengine/jobs/`, the CLI) give it their strategies, so the engine is
tested alone on fake recognizers (`tests/engine/`).

May import: audio, errors, postprocess, types.
"""
