"""The streaming RL trainer: trajectories in from Kafka, policy versions out.

- :mod:`.transform` and :mod:`.packing`: trajectories → loss-masked token sequences →
  fixed-length micro-batches (recorded token ids used as they are).
- :mod:`.advantages`, :mod:`.losses`, :mod:`.distill`: group-relative advantages, the
  decoupled clipped policy loss against recorded behaviour logprobs, on-policy distillation.
- :mod:`.learner`: one update on a batch (no Kafka).
- :mod:`.stream`: consumption under the staleness rule (``sf-policy-version`` header only),
  checkpoints with offsets (:mod:`.checkpoint`, :mod:`.offsets`), weights and announcements
  (:mod:`.weights`, :mod:`.vllm_reload`; followers read them with
  :class:`safactory.infra.policy_watch.PolicyWatcher`).
- :mod:`.toytask`: a verifiable toy task for tests and benchmarks.
"""
