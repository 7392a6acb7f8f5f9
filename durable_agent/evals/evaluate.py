"""`evaluate`: a pydantic-evals `Dataset` of prompts, each case one run of an agent.

    report = await evaluate(agent, dataset)                          # in-process
    report = await evaluate("support", dataset, client=agents, name="prompt-v2")  # durable

pydantic-evals runs the cases (bounded by `max_concurrency`, with its rich progress bar),
its evaluators score them and its `EvaluationReport` is what comes back; this module only
makes each case a run. Its evaluators get an `EvalRun` (`runs`) as the output. With a
client, each case is a durable run on the workers (under their model quotas), with the
workflow id `eval-{name}-{case}`: evaluating the same name again after a crash or Ctrl-C
reuses the runs that exist (finished: their results; running: waits for them), so no case
is paid for twice. Each case's cost is its `cost` metric; the report's `total cost`
analysis adds them up.
"""

from __future__ import annotations

import contextvars
import copy
from dataclasses import dataclass
from typing import Any

from pydantic_evals import Case, Dataset
from pydantic_evals.dataset import increment_eval_metric, set_eval_attribute
from pydantic_evals.evaluators import ReportEvaluator, ReportEvaluatorContext
from pydantic_evals.lifecycle import CaseLifecycle
from pydantic_evals.reporting import EvaluationReport
from pydantic_evals.reporting.analyses import ScalarResult

from ..agent.agent import Agent
from ..contract.errors import AgentError, UnknownAgentError, UserError
from ..temporal.client import AgentClient
from .runs import EvalRun, durable_run, eval_workflow_id, failed_run, from_result

__all__ = ["InvalidDataset", "TotalCost", "evaluate"]

_CASE: contextvars.ContextVar[str] = contextvars.ContextVar("durable_agent_eval_case")
"""The name of the case whose task runs in this context (set by `_NamedCase`)."""


class InvalidDataset(UserError):
    """The dataset cannot be evaluated as prompts to an agent; the message says why."""

    kind = "invalid_dataset"


class _NamedCase(CaseLifecycle[Any, Any, Any]):
    """Tells the case's task which case it runs (pydantic-evals hands tasks only inputs)."""

    async def setup(self) -> None:
        _CASE.set(self.case.name or "")


@dataclass(repr=False)
class TotalCost(ReportEvaluator[Any, Any, Any]):
    """The report's `total cost`: what every case's run cost, in US dollars."""

    def evaluate(self, ctx: ReportEvaluatorContext[Any, Any, Any]) -> ScalarResult:
        total = sum(case.metrics.get("cost", 0) for case in ctx.report.cases)
        return ScalarResult(title="total cost", value=round(total, 6), unit="USD")


def _named(dataset: Dataset[Any, Any, Any]) -> list[Case[Any, Any, Any]]:
    """The cases, each with the name pydantic-evals reports it under, checked: prompts."""
    if not isinstance(dataset, Dataset):
        raise InvalidDataset(
            f"evaluate() needs a pydantic_evals.Dataset, got {type(dataset).__name__}"
        )
    if not dataset.cases:
        raise InvalidDataset(f"dataset {dataset.name!r} has no cases")
    cases = []
    for index, case in enumerate(dataset.cases, 1):
        named = copy.copy(case)
        named.name = case.name or f"Case {index}"
        if not isinstance(case.inputs, str) or not case.inputs.strip():
            shown = repr(case.inputs)
            raise InvalidDataset(
                f"case {named.name!r} of dataset {dataset.name!r}: inputs must be a prompt "
                f"(a non-empty str), got {type(case.inputs).__name__} "
                f"{shown[:60] + '...' if len(shown) > 60 else shown}"
            )
        cases.append(named)
    return cases


async def evaluate(
    agent: Agent[Any] | str,
    dataset: Dataset[Any, Any, Any],
    *,
    client: AgentClient | None = None,
    name: str | None = None,
    max_concurrency: int = 8,
    progress: bool = True,
) -> EvaluationReport[Any, Any, Any]:
    """Runs every case of `dataset` (see the module docstring) and answers the report.

    `agent` is an `Agent` (in-process, or on the workers by its name) or, with a client,
    an agent's name. `name` names the evaluation (default: the dataset's name): with a
    client it is part of each run's workflow id, so reuse it only to resume the same
    evaluation. Raises `InvalidDataset` for a dataset whose inputs are not prompts and
    `UnknownAgentError` when no worker hosts the agent; an evaluator that raises is
    reported on its case (the others go on)."""
    cases = _named(dataset)
    if max_concurrency < 1:
        raise UserError(f"max_concurrency must be 1 or more, got {max_concurrency}")
    if client is None and not isinstance(agent, Agent):
        raise UserError(
            f"evaluating agent {agent!r} by name needs a client (its runs go to the workers); "
            "pass client=AgentClient(...) or the Agent itself"
        )
    experiment = name or dataset.name
    if not experiment:
        raise UserError("evaluate() needs a name (the dataset has none)")

    async def task(prompt: str) -> EvalRun:
        case = _CASE.get()
        if client is None:
            assert isinstance(agent, Agent)
            try:
                run = from_result(await agent.run(prompt))
            except AgentError as error:
                run = failed_run(error)
        else:
            run = await durable_run(client, agent, prompt, eval_workflow_id(experiment, case))
            set_eval_attribute("workflow_id", run.workflow_id)
        set_eval_attribute("status", run.status)
        if run.cost is not None:
            increment_eval_metric("cost", run.cost)
        return run

    evaluated: Dataset[Any, Any, Any] = Dataset(
        name=dataset.name,
        cases=cases,
        evaluators=dataset.evaluators,
        report_evaluators=[*dataset.report_evaluators, TotalCost()],
    )
    report = await evaluated.evaluate(
        task,
        name=experiment,
        max_concurrency=max_concurrency,
        progress=progress,
        lifecycle=_NamedCase,
    )
    unknown = [f for f in report.failures if UnknownAgentError.__name__ in f.error_message]
    if unknown:
        raise UnknownAgentError(unknown[0].error_message.split(": ", 1)[-1])
    return report
