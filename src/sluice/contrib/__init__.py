"""Integrations: the clients and frameworks teams already run, on sluice's public API.

Each integration here could ship as a distribution of its own that only does
``import sluice``: it uses the names of ``sluice.__all__`` and ``sluice.aio.__all__``,
never the engine, the storage backends or another feature's modules (an import-linter
contract in pyproject.toml holds that), and its third-party package is an extra of
its own, named where it is first needed (``sluice.extras``). What an integration needs
that the public API lacks is added to the public API first. Features that reach
below it (``sluice.server``, ``sluice.spark``, ``sluice.gateways``) are not
integrations and live beside the engine.
"""
