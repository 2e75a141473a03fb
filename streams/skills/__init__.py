"""Skills: lessons distilled from failed and unsafe trajectories, retrieved for new tasks."""

from .follow import SkillFollower
from .library import SkillLibrary, distil_lessons

__all__ = ["SkillFollower", "SkillLibrary", "distil_lessons"]
