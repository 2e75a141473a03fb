"""Skills: lessons distilled from failed and unsafe trajectories, retrieved for new tasks."""

from .library import SkillLibrary, distil_lessons, render_for_prompt

__all__ = ["SkillLibrary", "distil_lessons", "render_for_prompt"]
