"""Benchmarks: ``make bench`` (``python -m bench``). Each writes a report under bench/reports/."""
