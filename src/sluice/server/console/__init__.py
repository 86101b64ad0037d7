"""The web console (docs/server.md#the-console): server-rendered pages with htmx, on the
same keys and grants as the API, served at ``/`` by ``sluice serve``."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

import sluice
from sluice.server.console.routes import public, router
from sluice.server.console.samples import DEFAULT_EVERY, DUTY, Sampler

__all__ = ["DEFAULT_EVERY", "DUTY", "install"]


def install(
    app: FastAPI,
    db: sluice.Database,
    *,
    sample_every: float = DEFAULT_EVERY,
    sample_duty: float = DUTY,
) -> Sampler:
    """Serve the console from ``app``; the sampler of its charts is returned, to be
    started and closed with the app."""
    app.state.console_sampler = sampler = Sampler(db, every=sample_every, duty=sample_duty)
    app.include_router(public)
    app.include_router(router)
    static = resources.files(__name__).joinpath("static")
    # The console's script and style hold no data: they are served without a key, as
    # the login page that needs them is.
    app.mount("/console/static", StaticFiles(directory=str(static)), name="console-static")
    return sampler
