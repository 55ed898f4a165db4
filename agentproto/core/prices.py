"""The price table budgets count cost with, where an agent reports tokens but no running cost
(Codex; Claude reports its cost only at a turn's end). Versioned: ``SessionInfo.budget``
names the version a session counted with. Sans-IO, values only.

Prices are USD per million tokens (input, cached input, output), as the vendors list them on
``VERSION``'s date. A model is found by the session's ``model`` option (the longest known name
it starts with), else by the agent's default; an agent with neither has no price.
"""

from __future__ import annotations

VERSION = "2026-12-01"

MODELS: dict[str, tuple[float, float, float]] = {
    "claude-opus-4": (15.0, 1.5, 75.0),
    "claude-opus-4-5": (5.0, 0.5, 25.0),
    "claude-sonnet-4": (3.0, 0.3, 15.0),
    "claude-haiku-4": (1.0, 0.1, 5.0),
    "gpt-5": (1.25, 0.125, 10.0),
    "gpt-5-mini": (0.25, 0.025, 2.0),
    "gpt-5-codex": (1.25, 0.125, 10.0),
    "mock": (1.0, 0.1, 2.0),  # the mock's, in round numbers for tests
}

#: Each agent's model when the session names none it knows (the CLIs' defaults).
AGENTS: dict[str, str] = {"claude": "claude-sonnet-4", "codex": "gpt-5-codex", "mock": "mock"}
#: Aliases the CLIs take for a model.
ALIASES: dict[str, str] = {"opus": "claude-opus-4-5", "sonnet": "claude-sonnet-4", "haiku": "claude-haiku-4"}


def price(agent: str, model: str | None) -> tuple[str, tuple[float, float, float]] | None:
    """The model a session is priced as and its prices, or None."""
    if model:
        model = ALIASES.get(model, model)
        known = [name for name in MODELS if model.startswith(name)]
        if known:
            name = max(known, key=len)
            return name, MODELS[name]
    default = AGENTS.get(agent)
    return None if default is None else (default, MODELS[default])


def cost(prices: tuple[float, float, float], input_tokens: int, cached: int, output: int) -> float:
    """USD for a usage (``input_tokens`` includes the cached ones, as TurnUsage counts them)."""
    fresh = max(0, input_tokens - cached)
    return (fresh * prices[0] + cached * prices[1] + output * prices[2]) / 1e6
