"""Python client for the forecast service: pandas in and out, retries done right, one exception tree."""

from forecast_client._client import API_KEY_ENV, BASE_URL_ENV, AsyncClient, Client, UnexpectedResponse, __version__
from forecast_client._errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    DataValidationError,
    ForecastClientError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RateLimited,
    ServerError,
    Unauthorized,
    UnsupportedMediaType,
)
from forecast_client._retry import RetryPolicy
from forecast_client._series import FREQUENCIES, infer_frequency
from forecast_client._types import ForecastResult, ModelInfo, RateLimit, VerifyResult

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "FREQUENCIES",
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AsyncClient",
    "Client",
    "DataValidationError",
    "ForecastClientError",
    "ForecastResult",
    "InvalidRequest",
    "MethodNotAllowed",
    "ModelInfo",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "RateLimit",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "UnexpectedResponse",
    "UnsupportedMediaType",
    "VerifyResult",
    "__version__",
    "infer_frequency",
]
