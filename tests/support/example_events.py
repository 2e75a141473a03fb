"""One valid example of every event type, for round-trip tests."""

from __future__ import annotations

from safactory import schemas as s


def example_events() -> list[s.Event]:
    """A filled-in instance of each event type in the catalogue."""
    call = s.ToolCall(id="c1", function=s.FunctionCall(name="bash", arguments='{"cmd": "ls"}'))
    msgs = [
        s.ChatMessage(role="user", content="list my files"),
        s.ChatMessage(role="assistant", tool_calls=[call]),
        s.ChatMessage(role="tool", tool_call_id="c1", content="a.txt"),
    ]
    tstep = s.TrajectoryStep(
        step_index=0, messages=msgs, token_ids=[5, 6], logprobs=[-0.1, -2.0], policy_version=3
    )
    verdict_fields = dict(
        episode_id="ep-1",
        source_event_id=s.step_id("ep-1", 0),
        step_index=0,
        env="os",
        checker="secrets.regex",
        checker_kind="rule",
        risk_type="secret_exposure",
        severity=s.Severity.HIGH,
        score=0.93,
        decision=s.Decision.BLOCK,
        evidence=[s.Evidence(text="AKIA...", field="tool_result", start=0, end=7)],
        policy_version=3,
    )
    return [
        s.Task(
            task_id="t-1",
            env="os",
            spec={"goal": "tidy ~/tmp"},
            seed=7,
            group_id="g-1",
            attack=s.AttackPlan(injector="ipi.tool_output", at_step=2),
        ),
        s.Step(
            episode_id="ep-1",
            step_index=0,
            env="os",
            task_id="t-1",
            group_id="g-1",
            policy_version=3,
            observation="$ ",
            action=s.Action(text="ls", tool_call=call),
            tool_result="a.txt",
            messages=msgs,
            token_ids=[1, 2, 3],
            logprobs=[-0.5, -0.1, -3.2],
            injection=s.Injection(
                injector="ipi",
                kind="indirect_prompt_injection",
                location="tool_result",
                payload="ignore previous",
            ),
            timing=s.Timing(started_at=1.0e9, policy_ms=12.5, env_ms=3.0),
            trace_id="ab12",
        ),
        s.EpisodeStarted(
            episode_id="ep-1",
            task_id="t-1",
            env="os",
            policy_name="tiny",
            policy_version=3,
            prompt=msgs[:1],
        ),
        s.EpisodeEnded(
            episode_id="ep-1",
            task_id="t-1",
            env="os",
            outcome=s.Outcome.SUCCESS,
            task_reward=1.0,
            safety=s.SafetyOutcome(unsafe=True, violations=["rm"]),
            num_steps=4,
            policy_version=3,
        ),
        s.Verdict(**verdict_fields),
        s.Alert(**verdict_fields),
        s.Trajectory(
            episode_id="ep-1",
            group_id="g-1",
            task_id="t-1",
            env="os",
            prompt=msgs[:1],
            steps=[tstep],
            outcome=s.Outcome.SUCCESS,
            reward=0.5,
            reward_components={"task": 1.0, "safety": -0.5},
            policy_version=3,
            max_policy_version=4,
        ),
        s.Score(episode_id="ep-1", scorer="dataelf", scores={"ifd": 0.8}, composite=0.7),
        s.Skill(
            skill_id="sk-1",
            title="check before rm",
            lesson="list files before deleting",
            risk_types=["destructive_operation"],
            source_episode_ids=["ep-1"],
        ),
        s.PolicyVersion(
            policy_name="tiny", policy_version=4, uri="file:///w/4.safetensors", sha256="0" * 64
        ),
        s.Control(episode_id="ep-1", command=s.ControlCommand.HALT, reason="secret exfiltration"),
        s.Label(episode_id="ep-1", unsafe=True, risk_type="exfiltration", labeller="ana"),
    ]
