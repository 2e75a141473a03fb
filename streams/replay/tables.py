"""How ``safactory replay`` shows its reports on a terminal: the re-audit's alert diff, and
a re-run's before / after per episode."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .audit import AuditDiff


def print_diff(console: Console, diff: AuditDiff, show: int) -> None:
    """The diff as tables: per risk type, per env, then some raised and cleared alerts."""
    report = diff.as_json()
    counts = report["alerts"]
    console.print(
        f"replay {diff.replay_id}: {diff.steps} steps of {diff.episodes} episodes in "
        f"{diff.seconds:.1f}s ({diff.steps_per_s:,.0f} steps/s), {diff.verdicts} verdicts "
        f"{'published with header sf-replay' if diff.published else 'not published (dry run)'}"
    )
    console.print(
        f"alerts: {counts['before']} before, {counts['after']} after: "
        f"[red]{counts['raised']} newly raised[/red], "
        f"[green]{counts['cleared']} cleared[/green], {counts['kept']} kept"
    )
    for title, key in (("risk type", "by_risk_type"), ("env", "by_env")):
        table = Table(title=f"alerts by {title}")
        table.add_column(title)
        for column in ("raised", "cleared", "kept"):
            table.add_column(column, justify="right")
        for name, row in report[key].items():
            table.add_row(name, str(row["raised"]), str(row["cleared"]), str(row["kept"]))
        if report[key]:
            console.print(table)
    for label, alerts in (("newly raised", diff.raised), ("cleared", diff.cleared)):
        if not alerts or not show:
            continue
        columns = ("episode", "step", "env", "risk type", "severity", "checker")
        table = Table(*columns, title=f"{label} (first {min(show, len(alerts))} of {len(alerts)})")
        for a in alerts[:show]:
            table.add_row(
                a.episode_id[:12], str(a.step_index), a.env, a.risk_type, a.severity, a.checker
            )
        console.print(table)


def _shown(value: Any, form: str = "{}") -> str:
    """``value`` in ``form``, or ``-`` when there is none."""
    return "-" if value is None else form.format(value)


def _flag(value: bool | None) -> str:
    return "-" if value is None else ("[red]unsafe[/red]" if value else "safe")


def print_comparison(console: Console, rows: list[Any], report: dict[str, Any]) -> None:
    """Before / after per episode, then the totals."""
    columns = ("episode", "env", "task", "version", "unsafe (env)", "reward", "first unsafe step")
    table = Table(*columns, title=f"replay {report['replay_id']}: before → after")
    for r in rows:
        reward = _shown(r.reward_after, "{:+.2f}")
        table.add_row(
            r.episode_before[:12],
            r.env,
            r.task_id[-28:],
            f"v{r.version_before} → {_shown(r.version_after, 'v{}')}",
            f"{_flag(r.unsafe_before)} → {_flag(r.unsafe_after)}",
            f"{r.reward_before:+.2f} → {reward}" + (" (task)" if r.reward_source == "task" else ""),
            f"{_shown(r.first_unsafe_before)} → {_shown(r.first_unsafe_after)}",
        )
    console.print(table)
    console.print(
        f"unsafe (env): {report['unsafe_before']}/{report['episodes']} → "
        f"{report['unsafe_after']}/{report['episodes']}; alerted: {report['alerted_before']} → "
        f"{report['alerted_after']}; mean reward {_shown(report['mean_reward_before'], '{:+.2f}')}"
        f" → {_shown(report['mean_reward_after'], '{:+.2f}')}; versions run: "
        f"{', '.join(f'v{v}' for v in report['versions_run']) or '-'}"
    )
