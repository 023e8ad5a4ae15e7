"""AgentTalk: a file-based society of LLM agents."""

__version__ = "0.1.0"
