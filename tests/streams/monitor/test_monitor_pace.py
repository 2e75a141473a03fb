"""A view is shown again after a change (at most every ``min_s``) and while idle (every
``idle_s``), the same pace for the terminal dashboard and the web page's stream."""

from __future__ import annotations

from safactory.streams.monitor.view import Pace


def test_a_change_is_shown_at_most_every_min_s_and_an_idle_view_every_idle_s() -> None:
    pace = Pace(min_s=0.25, idle_s=1.0)
    assert pace.due(0, 100.0)  # the first look always shows
    assert not pace.due(0, 100.1)  # nothing changed
    assert not pace.due(1, 100.2)  # changed, but too soon
    assert pace.due(1, 100.25)  # changed, and min_s passed
    assert not pace.due(1, 101.0)  # idle, not yet idle_s
    assert pace.due(1, 101.25)  # idle for idle_s: shown again (rates decay)
