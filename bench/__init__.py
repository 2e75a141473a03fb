"""Benchmarks that print side-by-side numbers (recorded in docs/BENCHMARKS.md); each is a
script (``python bench/bus.py``) and a module of the installed package
(``safactory.bench.bus``), so one bench reuses another's parts by import."""
