"""The Nixtla-compatible door's own kinds of domain error, for refusals its documented shape names with a code of
their own (docs/nixtla.md); the routes pick the code, app.web.errors the status."""

from __future__ import annotations

from app.errors import MalformedInput


class TooManyCovariates(MalformedInput):
    """A call's exogenous columns are over the covariate caps POST /forecast holds a series to."""
