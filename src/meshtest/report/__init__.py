"""Reporting (report aggregation): what a person or a CI browser reads.

- :mod:`.reporter` — report lines, closing summary, spec-ID table
- :mod:`.results` — ``results.jsonl``: writing it, and reading the runs under ``dist/test`` (stdlib only)
- :mod:`.html` — static HTML report (Jinja2)
- :mod:`.junit` — JUnit XML (junitparser)
- :mod:`.specids` — test-plan ID coverage of scanned cases
"""
