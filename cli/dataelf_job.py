"""The private DataElf job, as the sandbox runs it: the plan runner with the auditor's
masker and re-judging wired in (``python -m safactory.cli.dataelf_job PLAN DB OUT``)."""

from __future__ import annotations

import sys

from ..sinks.dataelf.private import job
from ..streams.audit.mask import mask_text
from ..streams.audit.rejudge import rejudge

JOB = [sys.executable, "-m", __name__]
"""The command line that runs this job (before its arguments)."""

if __name__ == "__main__":
    job(sys.argv[1:], mask=mask_text, rejudge=rejudge)
