"""Evaluating agents on pydantic-evals datasets: each case a run, in-process or durable on
the workers (see `evaluate`). Nothing in the library imports this package."""

from __future__ import annotations

from .evaluate import InvalidDataset, TotalCost, evaluate
from .runs import EvalRun, EvalToolCall, eval_workflow_id

__all__ = ["EvalRun", "EvalToolCall", "InvalidDataset", "TotalCost", "eval_workflow_id", "evaluate"]
