"""The contract layer: the nouns every layer shares, and nothing else.

Messages, usage, errors, checkpoints and their resume evidence, run state, human decisions
and stream records are defined here once; the engine, the Temporal integration and the
front ends all read and write these types. This package imports nothing else of
`durable_agent`, so it can be read (and serialized) on its own: its models are the JSON a
run's checkpoints, history and stream are made of.
"""
