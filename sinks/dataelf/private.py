"""Sandboxed DataElf runs, and private ones: data usable but not seen.

A plan runs as a job in a bubblewrap sandbox: no network (its own empty network
namespace), every capability dropped, no device nodes (``/dev/urandom`` is a read-only file
of fresh random bytes, for libraries that seed from it), the interpreter, the project and
the database mounted read-only, only the run's output folder writable. The folder may hold
only the files the plan names, ``plan.json`` and the manifest, which the host writes again;
anything else, and the whole run is discarded. A plain run prints its result rows. A
private run (a masker given) is checked further by the host after the job, not trusted
from it:

- the plan must end in an aggregate, a plot or an export (:func:`refusal`): a plan whose
  result is raw rows is refused before anything runs;
- exports are masked by the auditor's secret and personal-data rules (inside the job, and
  again by the host), as are aggregate keys, chart labels and whatever the job prints, which
  it prints only when the plan aggregated.

A job cannot hurt the host: its memory (``RLIMIT_DATA``: the heap and every private
mapping, not the libraries' code), CPU time and the size of any file it writes are limited
(:class:`Limits`; past one the job ends with one line naming the limit and the flag that
raises it), and the host releases only regular files the plan names: a symlink, a hard
link, a device or a folder in the run folder discards the run, checked without following
anything.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from ..location import Db, location
from .limits import DEFAULT_LIMITS, LIMITS_ENV, Limits
from .masking import mask_file
from .operators import Export, Mask, PlanError, Plot, Services
from .plan import MANIFEST_FILE, PLAN_FILE, Plan, preview, run_plan

RESULT_STEPS = frozenset({"aggregate", "plot", "export"})
"""What a private plan may end with."""


JOB_TIMEOUT_S = 600.0
JOB_PLAN = "/sf-plan.json"
"""Where the job finds its plan."""
_PROJECT = Path(__file__).resolve().parents[2]
"""The package's folder (an editable install imports from it)."""


def refusal(plan: Plan) -> str | None:
    """Why ``plan`` may not run privately (None: it may)."""
    last = plan.steps[-1].NAME
    if last not in RESULT_STEPS:
        return (
            f"private mode: the plan's result would be raw rows (it ends with {last}); end "
            "it with aggregate, plot or export (exports are masked)"
        )
    return None


def run_sandboxed(
    plan: Plan,
    db: Db,
    out: Path,
    *,
    job: list[str],
    mask: Mask | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str, dict[str, str]]:
    """Run ``plan`` on ``db`` in the sandbox into ``out`` (new or empty): ``job`` is the
    command that runs :func:`job` there (the caller wires its services, as this host wires
    ``mask``). With ``mask`` the run is private. Returns what the job printed (masked when
    private) and the manifest. :class:`PlanError` when refused or failed."""
    out = out.resolve()  # the job runs elsewhere: a relative folder means the caller's
    plan = plan.pinned(time.time()).located(Path.cwd())
    for path in plan.files():
        if not path.is_file():
            raise PlanError(f"{path}: the plan reads it, and it is not a readable file")
    reason = refusal(plan) if mask is not None else None
    if reason is not None:
        raise PlanError(reason)
    where = location(db)
    if where.remote:
        raise PlanError(f"a sandboxed plan reads a local database (it has no network): {db}")
    folder = Path(where.uri).resolve()
    if shutil.which("bwrap") is None:
        raise PlanError("a sandboxed plan needs bubblewrap: apt-get install -y bubblewrap")
    if out.exists() and any(out.iterdir()):
        raise PlanError(f"--out {out}: a sandboxed plan writes into a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    mode = "private" if mask is not None else "plain"
    with tempfile.TemporaryDirectory(prefix="sf-dataelf-") as staging:
        plan_path = Path(staging) / PLAN_FILE
        plan_path.write_text(plan.model_dump_json())
        random_bytes = Path(staging) / "urandom"
        random_bytes.write_bytes(os.urandom(1 << 16))
        sandbox = _sandbox(plan_path, random_bytes, folder, out, limits, plan.files())
        wall = max(JOB_TIMEOUT_S, 2.0 * limits.cpu_s)
        try:
            done = subprocess.run(
                [*sandbox, *job, JOB_PLAN, str(folder), str(out), mode],
                capture_output=True,
                text=True,
                timeout=wall,
            )
        except subprocess.TimeoutExpired:
            _discard(out)
            raise PlanError(
                f"the {mode} job ran past {wall:g} s of wall time; raise --cpu-limit"
            ) from None
    if done.returncode != 0:
        _discard(out)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        limit = limits.why(done.returncode, done.stderr[-2000:])
        said = limit or (lines[-1] if lines else f"exit status {done.returncode}")
        raise PlanError(f"the {mode} job failed: {said}")
    return _released(plan, out, done.stdout, mask)


def run_anywhere(
    plan: Plan,
    db: Db,
    out: Path,
    *,
    job: list[str],
    services: Callable[[], Services],
    mask: Mask | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str, dict[str, str]]:
    """:func:`run_sandboxed`, except a plain plan on an object store (the sandbox has no
    network to reach one), which runs here with ``services()``; what it shows, the manifest.
    An ``out`` that is a symbolic link is refused: the run would write where it points."""
    if out.is_symlink():
        raise PlanError(
            f"--out {out} is a symbolic link (to {os.readlink(out)}); name a folder itself"
        )
    if mask is not None or not location(db).remote:
        return run_sandboxed(plan, db, out, job=job, mask=mask, limits=limits)
    table, manifest = run_plan(plan, db, out, services())
    return preview(table), manifest


def _sandbox(
    plan_path: Path, random_bytes: Path, db: Path, out: Path, limits: Limits, files: list[Path]
) -> list[str]:
    """bubblewrap's part of the job's command line (this interpreter's files readable, and
    the ``files`` the plan reads)."""
    readable = {Path(sys.prefix), Path(sys.base_prefix), _PROJECT, db, *files}
    readable |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    readable -= {Path("/tmp")}  # the job's /tmp is its own
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--tmpfs", "/tmp"]
    for link in ("bin", "lib", "lib64", "sbin"):
        top = Path("/") / link
        if top.is_symlink():
            argv += ["--symlink", str(top.readlink()), str(top)]
        elif top.is_dir():
            argv += ["--ro-bind", str(top), str(top)]
    paths = sorted(p.resolve() for p in readable)
    for path in (p for p in paths if not p.is_relative_to("/usr")):
        argv += ["--ro-bind", str(path), str(path)]
    argv += ["--ro-bind", str(plan_path), JOB_PLAN, "--bind", str(out), str(out)]
    argv += ["--dir", "/dev", "--ro-bind", str(random_bytes), "/dev/urandom"]
    argv += ["--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp"]
    argv += ["--setenv", "HF_HUB_OFFLINE", "1"]  # models come from installed packages only
    argv += ["--setenv", LIMITS_ENV, json.dumps(asdict(limits))]
    imports = [str(Path(p).resolve()) for p in sys.path if p and Path(p).is_dir()]
    argv += ["--setenv", "PYTHONPATH", ":".join(imports)]  # operators of installed plugins
    return [*argv, "--chdir", "/tmp", "--"]


def _released(plan: Plan, out: Path, printed: str, mask: Mask | None) -> tuple[str, dict[str, str]]:
    """Check (and, private, mask) what the job left; the manifest, written by the host."""
    named = {s.name: s for s in plan.steps if isinstance(s, Export | Plot)}
    for path in out.iterdir():  # lstat: nothing the job left is followed
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a plain file"
            _discard(out)
            raise PlanError(f"the job left {path.name}, {what}; the run is discarded")
    found = {p.name for p in out.iterdir()}
    extra = sorted(found - set(named) - {PLAN_FILE, MANIFEST_FILE})
    if extra:
        _discard(out)
        raise PlanError(f"the job wrote files its plan does not name: {extra}; discarded")
    manifest = {}
    if mask is None:  # a plain run may say how many rows it made
        manifest["rows"] = json.loads((out / MANIFEST_FILE).read_text())["rows"]
    for name, step in named.items():
        path = out / name
        if isinstance(step, Export) and mask is not None:
            try:
                mask_file(path, step.format, mask)
            except (ValueError, OSError) as exc:
                _discard(out)
                raise PlanError(f"the private job's {name} is not {step.format}: {exc}") from None
        manifest[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (out / PLAN_FILE).write_text(plan.model_dump_json(indent=2) + "\n")
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return (printed if mask is None else mask(printed)), manifest


def _discard(out: Path) -> None:
    for path in out.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def job(argv: list[str], services: Services) -> None:
    """Inside the sandbox (``argv``: plan file, database, run folder, ``plain`` or
    ``private``): run the plan with ``services`` (a private run's with their ``mask``);
    print its result rows, in a private run only if it aggregated."""
    from .plan import load_plan, preview, run_plan

    _limit(Limits(**json.loads(os.environ.get(LIMITS_ENV, "{}"))))
    plan = load_plan(Path(argv[0]))
    private = argv[3] == "private"
    if private and services.mask is None:
        raise PlanError("the private job needs a masker")
    try:
        table, _ = run_plan(plan, Path(argv[1]), Path(argv[2]), services)
    except MemoryError:
        raise SystemExit("the job reached its memory limit") from None
    except OSError as exc:
        if exc.errno != errno.EFBIG:
            raise
        raise SystemExit("the job reached its output limit") from None
    if not private or any(step.NAME == "aggregate" for step in plan.steps):
        print(preview(table))


def _limit(limits: Limits) -> None:
    """Hold this process (the job) to ``limits`` (a plugin cannot raise the hard ones): past
    its CPU seconds the kernel ends it with SIGXCPU, which the host names as the CPU limit,
    even in native code that never returns to Python (a handler there would never run, and
    the hard limit's SIGKILL five seconds later would read as running out of memory)."""
    resource.setrlimit(resource.RLIMIT_DATA, (limits.memory_mb << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_mb << 20,) * 2)
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU's default action dumps core
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
