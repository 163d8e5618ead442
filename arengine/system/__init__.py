"""Process plumbing: Prometheus metrics, JSON logs, memory readings, the allocator and the thread
counts every other part runs with.

May import: errors, types.
"""
