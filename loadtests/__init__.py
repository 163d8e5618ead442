"""Benchmarks and load tools for arengine; results are published in BENCHMARKS.md."""
