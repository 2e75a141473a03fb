"""The OS environment reads a command out of a plain-text reply (a model without tool
calling): a fenced code block's first line or a ``$ `` line is a shell call; other text is
the finish answer."""

from __future__ import annotations

import json

import pytest

from safactory.agents.envs.os_env import OSEnv
from safactory.schemas import Action


@pytest.mark.parametrize(
    ("reply", "command"),
    [
        ("Sure!\n```bash\nls -la ~/docs\nrm x\n```", "ls -la ~/docs"),
        ("```\n$ du -sh .\n```", "du -sh ."),
        ("First look:\n$ cat notes.txt\nthen decide", "cat notes.txt"),
        ("```sh\nrm -rf ~\n```", "rm -rf ~"),
    ],
)
def test_a_quoted_command_becomes_a_shell_call(reply: str, command: str) -> None:
    action = OSEnv().resolve(Action(text=reply))
    assert action.tool_call is not None and action.tool_call.function.name == "shell"
    assert json.loads(action.tool_call.function.arguments) == {"command": command}


@pytest.mark.parametrize("reply", ["I will not delete your files.", "The answer is $5.", ""])
def test_other_text_stays_the_answer(reply: str) -> None:
    action = Action(text=reply)
    assert OSEnv().resolve(action) is action
