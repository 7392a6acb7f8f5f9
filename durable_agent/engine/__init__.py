"""The engine: the agent loop and what it is made of, written once for both drivers.

`node_io` and `nodes` (the working nodes as plain functions of serializable inputs),
`runner` (the `NodeRunner` seam and the `Driver`), `controller` (the one run controller),
`loop/` (the loop, composed of small collaborators), `spec` (the agent's configuration as
the loop reads it), and the helpers they use. It imports the contract and the model base
classes, never `durable_agent.agent` or anything above it.
"""
