"""The Nixtla-compatible routes' errors, in Nixtla's shape (docs/nixtla.md)."""

from __future__ import annotations

from app.web.errors import ApiError


class NixtlaError(ApiError):
    """An answer in Nixtla's error shape, ``{"detail": message}``: the client raises it as an ApiError whose
    body is this, so the message names what was wrong."""

    code = "INVALID_REQUEST"

    def __init__(self, message: str, *, status: int = 400, code: str = "INVALID_REQUEST") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def unsupported(feature: str, hint: str = "") -> NixtlaError:
    return NixtlaError(f"{feature} is not supported by this service (a self-hosted forecasting service, not "
                       f"TimeGPT).{(' ' + hint) if hint else ''}", code="UNSUPPORTED_FEATURE")
