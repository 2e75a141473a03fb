"""What a sandboxed DataElf job may use, and how a job that ran into a limit is told apart
(a module of its own: the command line reads its defaults without loading the operators)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

LIMITS_ENV = "SF_JOB_LIMITS"
"""How the host hands the limits to the job (JSON)."""


@dataclass(frozen=True)
class Limits:
    """What a sandboxed job may use (the ``data ask`` flags that raise each)."""

    memory_mb: int = 4096
    """``--memory-limit``: heap and private mappings."""
    cpu_s: int = 600
    """``--cpu-limit``: CPU seconds."""
    output_mb: int = 1024
    """``--output-limit``: the largest file it may write."""

    def why(self, returncode: int, said: str) -> str | None:
        """The limit a job that ended so ran into, as one line (None: none of them)."""
        killed = {abs(returncode), returncode - 128}
        if signal.SIGXCPU in killed:  # the job's own action at its CPU limit
            return f"it used its CPU time limit of {self.cpu_s} s; raise it with --cpu-limit"
        if any(sign in said for sign in _OUT_OF_MEMORY) or signal.SIGKILL in killed:
            return (
                f"it ran out of its memory limit of {self.memory_mb} MiB; raise it with "
                "--memory-limit"
            )
        if "output limit" in said or signal.SIGXFSZ in killed:
            return (
                f"it wrote past its output limit of {self.output_mb} MiB; raise it with "
                "--output-limit"
            )
        return None


_OUT_OF_MEMORY = (
    "memory limit",
    "MemoryError",
    "Cannot allocate memory",
    "bad_alloc",
    "can't spawn worker thread",
    "failed to allocate",
)
"""What a job that ran out of memory says (Python, Arrow, the Rust runtime under LanceDB)."""


DEFAULT_LIMITS = Limits()
