"""The example agents' tools: plain functions, run by the `tool_call` activity."""

from __future__ import annotations

from durable_agent import CallDeferred

__all__ = [
    "deploy",
    "get_weather",
    "publish_article",
    "run_report",
    "search_notes",
    "service_status",
]


async def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: the city name, e.g. "Paris"
    """
    return f"sunny and 21°C in {city}"


async def service_status(env: str) -> str:
    """Health of the service in an environment.

    Args:
        env: "staging" or "prod"
    """
    return f"{env}: all checks green"


async def deploy(env: str, version: str) -> str:
    """Deploy a version of the service. Needs a human's approval.

    Args:
        env: "staging" or "prod"
        version: the version tag to deploy
    """
    return f"deployed {version} to {env}"


async def run_report(query: str) -> str:
    """Run a report in the warehouse. It takes hours: the result is delivered later.

    Args:
        query: what the report should answer
    """
    raise CallDeferred(f"the warehouse runs {query!r}; deliver its rows when it is done")


async def search_notes(topic: str) -> str:
    """Look a topic up in the team's notes.

    Args:
        topic: what to look up
    """
    return f"the notes on {topic!r} say it is well documented and widely used"


async def publish_article(title: str, body: str) -> str:
    """Publish an article on the team's site. Needs a human's approval.

    Args:
        title: the headline
        body: the article
    """
    return f"published {title!r} ({len(body)} characters)"
