"""Offline tooling, run by people and the CLI, never by a live component: trace importers
(``importers``), the batch audit of imported records (``batch``), the auditor as a library
call in a user's own process (``scan``), and the scripts that train the auditor's heads and
fit its calibration (``audit_training``, with their data).

Like ``cli/``, it may import ``schemas/``, ``infra/`` and the components; no component
imports it.
"""
