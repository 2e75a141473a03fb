"""The names of the risks the auditor reports (free strings; these are the built-ins)."""

from __future__ import annotations

from typing import ClassVar


class RiskType:
    """Names of the risk types the checkers report (free strings; these are the built-ins)."""

    DIRECT_PROMPT_INJECTION = "direct_prompt_injection"
    INDIRECT_PROMPT_INJECTION = "indirect_prompt_injection"
    GOAL_HIJACK = "goal_hijack"
    HARMFUL_CONTENT = "harmful_content"
    PRIVACY_LEAK = "privacy_leak"
    SECRET_EXPOSURE = "secret_exposure"
    DATA_EXFILTRATION = "data_exfiltration"
    DESTRUCTIVE_OPERATION = "destructive_operation"
    PRIVILEGE_ESCALATION = "privilege_escalation"
    FRAUD = "fraud"
    INSECURE_CODE = "insecure_code"
    BACKDOOR_TRIGGER = "backdoor_trigger"
    DATA_POISONING = "data_poisoning"
    FACTUAL_INCONSISTENCY = "factual_inconsistency"
    OVER_REFUSAL = "over_refusal"
    UNSAFE_BEHAVIOUR = "unsafe_behaviour"
    """Whole-trajectory judgement without a single named risk (trajectory heads, judges)."""
    CHECKER_ERROR = "checker_error"

    PRIMARY: ClassVar[tuple[str, ...]] = (
        DIRECT_PROMPT_INJECTION,
        INDIRECT_PROMPT_INJECTION,
        GOAL_HIJACK,
        HARMFUL_CONTENT,
        PRIVACY_LEAK,
        SECRET_EXPOSURE,
        DATA_EXFILTRATION,
        DESTRUCTIVE_OPERATION,
        PRIVILEGE_ESCALATION,
        FRAUD,
        INSECURE_CODE,
        BACKDOOR_TRIGGER,
        DATA_POISONING,
    )
    SECONDARY: ClassVar[tuple[str, ...]] = (FACTUAL_INCONSISTENCY, OVER_REFUSAL)
