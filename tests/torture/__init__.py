"""The torture suite (issue 5): crashes, bursts, bad input, LLM faults, a full disk.

Short sizes run in CI; `AGENTTALK_TORTURE=long` selects the long run (see docs/reliability.md).
"""
