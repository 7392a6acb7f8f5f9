"""The `coder` example agent: it writes a Python module in its workspace, checks that it
compiles (a real `python -m py_compile` in the workspace's `local_dir()`), fixes it when it
does not, and asks a person before publishing it to `dist/`.

Its files live in the run's workspace, not on the worker: the run may wait a week for the
approval, move to another worker, be forked from any checkpoint, and each goes on with the
files exactly as of its checkpoint (`durable-agent workspace ID` lists them).

Like the other examples it uses the model `DURABLE_AGENT_MODEL` names, else OpenAI when a
key is set, else a small script: its first draft has a syntax error the compile catches, so
the run shows the fix.
"""

from __future__ import annotations

import re

from activities.coding import publish_module, write_module
from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from durable_agent.models import AgentInfo

from .agents import _prompt, _real_model, _returns

__all__ = ["AGENTS", "build_coder", "coder"]

README = "# A workspace of the coder agent\n\nModules it writes go here; published ones in dist/.\n"


def _module(prompt: str) -> str:
    found = re.search(r"([A-Za-z_]\w*)\.py", prompt)
    return f"{found.group(1)}.py" if found else "hello.py"


def _draft(path: str, broken: bool) -> str:
    name = path.removesuffix(".py")
    close = ")" if broken else "))"
    body = f'def {name}(who: str) -> str:\n    return f"hello, {{who}}"\n\n\n'
    return body + f'print({name}("world"{close}\n'


def _coder_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    path = _module(_prompt(messages))
    returns = _returns(messages)
    last = returns[0] if returns else None
    if last is None:
        code = _draft(path, broken=True)
        call = ToolCallPart(
            id=f"call_write_{step}", name="write_module", arguments={"path": path, "code": code}
        )
        return ModelResponse(parts=[TextPart(text=f"A first draft of {path}."), call])
    if last.name == "write_module" and "does not compile" in str(last.content):
        code = _draft(path, broken=False)
        call = ToolCallPart(
            id=f"call_write_{step}", name="write_module", arguments={"path": path, "code": code}
        )
        return ModelResponse(parts=[TextPart(text="It does not compile; fixing it."), call])
    if last.name == "write_module":
        call = ToolCallPart(
            id=f"call_publish_{step}", name="publish_module", arguments={"path": path}
        )
        return ModelResponse(parts=[TextPart(text=f"{path} compiles; publishing it."), call])
    if last.is_error:
        return ModelResponse(parts=[TextPart(text=f"Not published: {last.content}")])
    return ModelResponse(parts=[TextPart(text=f"Done: {last.content}")])


def build_coder() -> Agent:
    model = _real_model() or FunctionModel(_coder_script, name="scripted-coder")
    return (
        AgentBuilder(model)
        .name("coder")
        .instructions(
            "You write small Python modules. Write each with write_module (it compiles it); "
            "fix what does not compile; then publish it with publish_module."
        )
        .tools([write_module, publish_module])
        .approval_required_tools(["publish_module"])
        .workspace({"README.md": README})
        .build()
    )


coder = build_coder()
AGENTS = [coder]
"""The worker registers every `Agent` in a module's `AGENTS` list."""
