"""Dataset poisoning audit: backdoor triggers and flipped labels."""

from .audit import FlipFinding, LabeledRecord, PoisoningReport, TriggerFinding, audit_dataset

__all__ = ["FlipFinding", "LabeledRecord", "PoisoningReport", "TriggerFinding", "audit_dataset"]
