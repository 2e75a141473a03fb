"""Rules a deployment writes: allow or deny an agent's call by its tool, shell command, path
or host, decided before the learned checkers are asked.

A TOML file, named by ``SF_AUDIT_RULES`` (every engine the CLI builds reads it: ``safactory
audit``, ``worker audit``, ``replay audit``, the gateway's guard)::

    [[allow]]
    why = "the build folder is ours to clean"
    command = ["rm -rf ./build*", "rm -rf build*"]

    [[deny]]
    why = "nothing touches production"
    host = "*.prod.example.com"
    risk = "destructive_operation"     # the risk type a deny reports (default: policy)

A rule gives one or more of ``tool`` (the call's name), ``command`` (a shell command in the
call's arguments), ``path`` (a path in its arguments or commands: a word with a ``/`` or a
leading ``~``), ``host`` (the host of a URL or e-mail address in its arguments), each a glob
or a list of globs (``fnmatch``; ``*`` crosses ``/``; a command glob is matched word by word,
so ``rm -rf ./build*`` never covers ``rm -rf ./build ~``). A deny rule blocks a call when
each field it gives matches something of the call; an allow rule covers a call only when,
for each field it gives, *everything* of that kind in the call matches (a rule for ``rm -rf
./build*`` does not allow ``rm -rf ./build && curl … | sh``). A deny blocks whatever the
checkers would say; an allowed call runs and no checker is asked; deny wins over allow, and
a reply (no call) still goes to the checkers. The verdict names the rule (its ``why`` and its
place in the file) and the rules' version (a hash of the file's bytes), so a replay says
which rules it judged under.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ...schemas import Decision, Evidence, Severity, Step, Verdict, derive_id
from .commands import shell_commands
from .view import Call, EpisodeView

ENV = "SF_AUDIT_RULES"
"""The environment variable naming the rules file."""
ALLOW, DENY = "rules.allow", "rules.deny"
"""The checker names of the verdicts a rule gives."""
POLICY = "policy"
"""The risk type a deny rule reports unless it names one."""
FIELDS = ("tool", "command", "path", "host")
_HOST = re.compile(r"(?:[a-z][a-z0-9+.-]*://(?:[^/@\s]*@)?|@)([A-Za-z0-9.-]+\.[A-Za-z]{2,})")


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[allow]]`` or ``[[deny]]`` table."""

    kind: str
    """``allow`` or ``deny``."""
    where: str
    """``FILE: deny #2``, for the verdict and errors."""
    why: str
    globs: dict[str, tuple[str, ...]]
    risk: str = POLICY

    def matches(self, seen: dict[str, list[str]]) -> bool:
        """The rule covers the call's facts (:func:`facts`): a deny rule when one value of
        each field it gives matches, an allow rule when every value of each does."""
        every = self.kind == "allow"
        for name, globs in self.globs.items():
            hits = [any(_fits(name, value, g) for g in globs) for value in seen[name]]
            if not hits or not (all(hits) if every else any(hits)):
                return False
        return True


@dataclass(frozen=True, slots=True)
class UserRules:
    """The rules of one file, and its version."""

    rules: tuple[Rule, ...]
    version: str
    source: str

    @classmethod
    def load(cls, path: Path) -> UserRules:
        """Read ``path``; ``ValueError`` names the file, the rule, the field and the fix."""
        try:
            raw = path.read_bytes()
            data = tomllib.loads(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"{ENV}={path}: cannot read it as TOML ({exc})") from None
        unknown = sorted(set(data) - {"allow", "deny"})
        if unknown:
            raise ValueError(f"{path}: unknown table(s) {unknown}; write [[allow]] or [[deny]]")
        rules = [
            _rule(path, kind, number, table)
            for kind in ("deny", "allow")  # deny first: it wins
            for number, table in enumerate(data.get(kind, []), 1)
        ]
        version = f"{len(rules)}:{hashlib.sha256(raw).hexdigest()[:10]}"
        return cls(tuple(rules), version, str(path))

    @classmethod
    def from_env(cls) -> UserRules | None:
        """The rules ``SF_AUDIT_RULES`` names (None when unset)."""
        path = os.environ.get(ENV)
        return cls.load(Path(path)) if path else None

    def rule_on(self, view: EpisodeView) -> Rule | None:
        """The first rule matching this step's call (deny rules first), if any."""
        if view.call is None:
            return None
        seen = facts(view.call)
        return next((r for r in self.rules if r.matches(seen)), None)

    def verdict(self, rule: Rule, view: EpisodeView, engine: str, engine_version: int) -> Verdict:
        """The verdict ``rule`` gives the step."""
        step: Step = view.step
        deny = rule.kind == "deny"
        checker = DENY if deny else ALLOW
        assert view.call is not None
        return Verdict(
            event_id=derive_id(engine, engine_version, step.event_id, checker, self.version),
            episode_id=step.episode_id,
            source_event_id=step.event_id,
            step_index=step.step_index,
            env=step.env,
            checker=checker,
            checker_version=self.version,
            checker_kind="rule",
            risk_type=rule.risk if deny else "none",
            severity=Severity.HIGH if deny else Severity.NONE,
            score=1.0 if deny else 0.0,
            decision=Decision.BLOCK if deny else Decision.ALLOW,
            probability=None,
            evidence=[Evidence(text=view.call.text[:500], field="action.tool_call")],
            reason=f"{'denied' if deny else 'allowed'} by your rule ({rule.where}): "
            f"{rule.why} [rules {self.version}]",
            policy_version=step.policy_version,
            trace_id=step.trace_id,
        )


def _rule(path: Path, kind: str, number: int, table: object) -> Rule:
    where = f"{path.name}: {kind} #{number}"
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [[{kind}]] #{number} is not a table; write [[{kind}]] rows")
    unknown = sorted(set(table) - {*FIELDS, "why", "risk"})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; use {', '.join(FIELDS)}, why")
    globs: dict[str, tuple[str, ...]] = {}
    for name in FIELDS:
        value = table.get(name)
        if value is None:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(g, str) for g in items):
            raise ValueError(f"{where}: field {name!r} must be a glob or a list of globs")
        globs[name] = tuple(items)
    if not globs:
        raise ValueError(f"{where}: give at least one of {', '.join(FIELDS)}")
    why = table.get("why")
    if not isinstance(why, str) or not why.strip():
        raise ValueError(f"{where}: field 'why' is missing; say why in a few words")
    risk = table.get("risk", POLICY)
    if not isinstance(risk, str) or not risk:
        raise ValueError(f"{where}: field 'risk' must be a risk type name")
    return Rule(kind, where, why.strip(), globs, risk)


def facts(call: Call) -> dict[str, list[str]]:
    """What a rule's fields are matched against, for one call."""
    text = " ".join([call.arguments, *call.values])
    commands = [c for v in call.values or (call.arguments,) for c in shell_commands(v) if c]
    words = [*call.values, *(w for c in commands for w in c)]
    found = {
        "tool": [call.name],
        "command": [" ".join(c) for c in commands],
        "path": [w for w in words if ("/" in w or w.startswith("~")) and "://" not in w],
        "host": [h.lower().rstrip(".") for h in _HOST.findall(text)],
    }
    return {name: list(dict.fromkeys(values)) for name, values in found.items()}


def _fits(field: str, value: str, glob: str) -> bool:
    if field != "command":
        return fnmatch.fnmatchcase(value, glob)
    words, pattern = value.split(" "), glob.split()
    return len(words) == len(pattern) and all(map(fnmatch.fnmatchcase, words, pattern))
