"""The first question on a fresh machine: answered at once while the fine-tuned planner builds.

The fine-tuned planner's weights take 20-45 min to build on 2 cores (:mod:`.tuning`). The
first ``data ask`` does not wait for them: it starts the build as a background job (once:
a pid file says whether one runs, its log says how far it is) and plans meanwhile with the
base SmolLM2 reading the worked examples nearest to the request (the corpus's training
pairs), under the same answer grammar and grounding. Those plans are less often right
(BENCHMARKS.md), so the line printed with them says so; once the build is done, every
later question uses the fine-tuned planner.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ...infra.models import ensure_smollm2
from .planner import EmbeddedPlanner, Example, Prompt
from .tuning import STAMP, Recipe, digest, planner_dir

BUILD = [sys.executable, "-m", "safactory.sinks.dataelf.tuning"]
"""The build's command: the one a person runs to build in the foreground."""
SHOWN = 8
"""Worked examples the base model reads before the request (measured on dev pairs: 4 gave
45 %, 10 gave 50 %, the catalogue as a system message no more and 2.6x slower)."""


def built() -> bool:
    """Whether the fine-tuned planner's weights are here, made by today's recipe."""
    stamp = planner_dir() / STAMP
    try:
        return json.loads(stamp.read_text()).get("digest") == digest(Recipe())
    except (OSError, ValueError):
        return False


def _pid_file() -> Path:
    return planner_dir().with_name(f"{planner_dir().name}.building")


def log_file() -> Path:
    """Where the background build writes its progress."""
    return planner_dir().with_name(f"{planner_dir().name}.build.log")


def running() -> bool:
    """Whether a background build is running now (its pid alive and running its command)."""
    try:
        job = json.loads(_pid_file().read_text())
        command = Path(f"/proc/{job['pid']}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return command.split("\0")[:-1][-len(job["command"]) :] == job["command"]  # nice'd or not


def start() -> bool:
    """Start the build (:data:`BUILD`) in the background unless one runs; whether this call
    started it."""
    if running():
        return False
    command = list(BUILD)
    log_file().parent.mkdir(parents=True, exist_ok=True)
    with log_file().open("w") as log:
        job = subprocess.Popen(
            ["nice", "-n", "19", *command],  # a question asked meanwhile gets the cores
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the command that started it
        )
    _pid_file().write_text(json.dumps({"pid": job.pid, "command": command}))
    try:  # its own session is its own scheduling group, where nice alone means nothing
        Path(f"/proc/{job.pid}/autogroup").write_text("19")
    except OSError:
        pass  # no autogroups here: nice is enough
    return True


def progress() -> str:
    """The build's last progress line ("step 40/360 … about 21 min left"), or what is known."""
    try:
        lines = log_file().read_text(errors="replace").splitlines()
    except OSError:
        return "starting"
    steps = [line.strip() for line in lines if line.strip().startswith("step ")]
    return steps[-1] if steps else "starting: 20-45 min on 2 cores, by CPU"


def _unfinished() -> str | None:
    """Why the last build stopped unfinished (its log's last line), if it did: a build that
    finished ends its log with the weights' folder (they may since be stale)."""
    try:
        lines = [line for line in log_file().read_text(errors="replace").splitlines() if line]
    except OSError:
        return None
    last = lines[-1].strip() if lines else str(planner_dir())
    return None if last == str(planner_dir()) else last[:200]


def example_planner(values: dict[str, list[str]], base: Path | None = None) -> EmbeddedPlanner:
    """The base SmolLM2 (at ``base``) planning from the :data:`SHOWN` worked examples nearest
    the request."""
    from ...infra.embedding import MiniLM
    from .corpus import pairs

    examples = [Example(p.intent, p.steps) for p in pairs(Recipe().pairs) if p.steps]
    encoder = MiniLM()
    cache = planner_dir().with_name(f"dataelf-examples-minilm{encoder.layers}")
    prompt = Prompt(encoder.embed, examples, values, SHOWN, catalogue=False, cache=cache)
    return EmbeddedPlanner(values, base or ensure_smollm2(), examples=prompt)


def local_planner(values: dict[str, list[str]]) -> tuple[EmbeddedPlanner, str]:
    """The planner ``data ask`` uses on this machine and a line saying which: the fine-tuned
    one when built; else the base model from worked examples, the build started if none
    runs."""
    if built():
        line = "planning with SmolLM2-135M fine-tuned for DataElf (constrained to plans)…"
        return EmbeddedPlanner(values), line
    base = ensure_smollm2()  # converted before the build starts, which needs it too
    stopped = None if running() else _unfinished()
    began = "started" if start() else "running"
    if stopped:
        began += f"; the last build stopped unfinished: {stopped}"
    line = (
        f"DataElf's fine-tuned planner is building in the background ({began}; "
        f"{progress()}; log {log_file()}). Until it is built, plans come from the base "
        "SmolLM2 reading worked examples: right less often, so read the plan before you run it."
    )
    return example_planner(values, base), line
