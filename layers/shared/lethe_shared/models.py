"""The base of every Lethe pydantic model.

A pydantic model builds its validation schema when its class is defined unless told otherwise.
A handler imports many models it never validates on a given path (the erasure API's report
models on a GET, the approval page's certificate models), and every cold start would pay for
them. With `defer_build`, each model's schema is built the first time the model is used, once
per process, so a cold start pays only for the models its event needs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """A pydantic model whose schema is built on first use, not at import."""

    model_config = ConfigDict(defer_build=True)
