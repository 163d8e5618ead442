"""The HTTP layer: the FastAPI app (`app`), its endpoints (`routes`, `recognition`, `listen`,
`jobs`, `references`, `render`), uploads and their limits (`uploads`, `protocol`), the server's
lifecycle (`server`) and the error mapping (`errors`). The stages never import it.

May import: arengine, audio, db, engine, errors, jobs, kinds, live, models, notify, outputs,
postprocess, service, settings, system, types.
"""
