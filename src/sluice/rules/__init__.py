"""Declarative rules (Demaq): queues, properties, slicings and rules in one definition
language, run by the engine (docs/rules.md)."""
