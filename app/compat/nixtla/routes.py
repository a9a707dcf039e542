"""The routes ``nixtla.NixtlaClient`` (0.9) calls, answering in Nixtla's shapes (docs/nixtla.md).

Same front doors, worker pool, keys, permissions, rate limits and usage as the service's own routes: the key
comes as Bearer (what the client sends), a call counts one request per series in it (as a batch does), and
every error, those of the key check and the rate limiter included, is ``{"detail": message}``, which the
client raises as an ApiError carrying that message. Bodies the client compresses (zstd, above 1 MB) are
decompressed within the same size limit as any body."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from typing import Any

import orjson
from flask import Blueprint, Response, g, request
from werkzeug.exceptions import HTTPException

from app.compat.nixtla import answers
from app.compat.nixtla.errors import TooManyCovariates
from app.compat.nixtla.schemas import MAX_FITS_PER_CALL, NixtlaError, read_series, unsupported
from app.compute.detect.results import DETECTOR_IDS
from app.compute.forecast.catalog import MODEL_IDS
from app.services import current_services
from app.web.body import read_body, require_json_content_type
from app.web.errors import ApiError, PayloadTooLarge, UnsupportedMediaType
from app.web.pipeline import current_context, current_key, requires, uncounted
from app.web.pool_work import compute_on_pool
from app.web.ratelimit import too_many
from app.web.validation import parse_json_body

bp = Blueprint("nixtla", __name__)
log = logging.getLogger("app.compat.nixtla")


def _detail(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> Response:
    response = Response(orjson.dumps({"detail": message, "code": code}), status=status, mimetype="application/json")
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


@bp.errorhandler(ApiError)
def _api_error(error: ApiError) -> Response:
    if error.status >= 500:
        log.error("request failed: %s", error.message, exc_info=error.__cause__ is not None)
        return _detail(error.status, f"{error.message} Quote request id {g.get('request_id')} when reporting it.",
                       error.code, error.headers)
    return _detail(error.status, error.message, error.code, error.headers)


@bp.errorhandler(TooManyCovariates)
def _too_many_covariates(error: TooManyCovariates) -> Response:
    return _api_error(NixtlaError(error.message, code="TOO_MANY_COVARIATES"))


@bp.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    if status == 413:
        return _api_error(PayloadTooLarge.over(current_services().settings.max_body_bytes))
    if status >= 500:
        return _detail(status, "Unexpected server error.", "INTERNAL_ERROR")
    return _detail(status, exc.description or "Bad request.", "INVALID_REQUEST")


def _json(body: Any) -> Response:
    # Every number a model or detector returns is finite (checked where they are computed).
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), mimetype="application/json")


def _run_on_pool(work: Any) -> Any:
    return compute_on_pool(current_services().pool, work)


def _body() -> Any:
    """The JSON body, decompressed first when the client sent it as zstd; 413 past the body limit either way."""
    require_json_content_type()
    limit = current_services().settings.max_body_bytes
    raw = read_body(limit)
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "zstd":
        import zstandard

        compressed = raw
        try:
            # Read within the limit first: a small body may expand to any size.
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(compressed)) as reader:
                raw = reader.read(limit + 1)
            if len(raw) > limit:
                raise PayloadTooLarge.over(limit)
            # The reader ends quietly at a cut-off frame; a one-shot pass (bounded now) says whether it is whole.
            whole = zstandard.ZstdDecompressor().decompressobj()
            whole.decompress(compressed)
        except zstandard.ZstdError as exc:
            raise NixtlaError(f"The body is not valid zstd: {str(exc)[:120]}.") from exc
        if not whole.eof:
            raise NixtlaError("The body is not valid zstd: the frame is cut short.")
    elif encoding != "identity":
        raise UnsupportedMediaType(f"Content-Encoding {encoding[:32]!r} is not supported: send zstd or none.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return parse_json_body(raw)  # its 400 names what is wrong


def _spend(series: int) -> None:
    """One request per series, as a batch counts them: the call itself was counted already, the rest is spent
    from the key's hour and day windows, all or nothing (429 when they do not fit)."""
    if series <= 1:
        return
    services, key = current_services(), current_key()
    count = services.limits.spend_long_windows(key, series - 1)
    current_context().limit_status = None  # the headers describe the windows after the spend
    if count.breached is not None:
        raise too_many(count.breached, f"Rate limit exceeded: a call with {series:,} series counts {series:,} "
                                       f"requests; {count.breached.limit} are allowed per "
                                       f"{count.breached.window}, {count.breached.remaining} are left.")
    services.usage.record(key.id, status=200, count=series - 1)


def _answer(compute: Callable[..., dict[str, Any]], *, detection: bool = False, forecast: bool = False,
            fits: Callable[[Any, int], int] = answers.fits_of_forecast) -> Response:
    settings = current_services().settings
    body = _body()

    def admit(series: int) -> None:
        # What a call may cost and the key's windows, before its series are rebuilt or computed.
        asked = fits(body, series)
        if asked > MAX_FITS_PER_CALL:
            raise NixtlaError(f"A call may ask for at most {MAX_FITS_PER_CALL:,} model fits (series x n_windows; "
                              f"levels cost nothing more); this one asks for {asked:,}. Send fewer windows or "
                              "series per call.", code="TOO_MUCH_WORK")
        _spend(series)

    nixtla_request = read_series(body, request.headers, max_points=settings.max_points, detection=detection,
                                 forecast=forecast, before_rebuild=admit)
    return _json(compute(nixtla_request, max_points=settings.max_points, run=_run_on_pool))


@bp.post("/v2/forecast")
@requires("read")
def forecast() -> Response:
    return _answer(answers.forecast, forecast=True)


@bp.post("/v2/cross_validation")
@requires("read")
def cross_validation() -> Response:
    return _answer(answers.cross_validation, fits=answers.fits_of_cross_validation)


@bp.post("/v2/anomaly_detection")
@requires("read")
def anomaly_detection() -> Response:
    return _answer(answers.anomaly_detection, detection=True)


@bp.post("/v2/online_anomaly_detection")
@requires("read")
def online_anomaly_detection() -> Response:
    return _answer(answers.online_anomaly_detection, detection=True)


@bp.get("/validate_api_key")
@uncounted
def validate_api_key() -> Response:
    """What the key can do here: the client calls the key valid on a 200 only, so a key the /v2 routes refuse
    (no read permission) is answered 403 saying so. The pipeline has already answered 401 for a key that is
    not valid at all."""
    held = ", ".join(current_key().permissions) or "none"
    if "read" not in current_key().permissions:
        return _detail(403, f"API key is valid but lacks the 'read' permission every /v2 route needs (it holds: "
                            f"{held}).", "UNAUTHORIZED")
    return _json({"detail": f"API key is valid for forecasting and anomaly detection (permissions: {held})."})


@bp.get("/model_params")
@uncounted
def model_params() -> Response:
    """What the client sizes its requests by: an input size no series reaches, so it sends every point (each
    series' whole history is what the models look at), and the longest horizon a forecast may have."""
    settings = current_services().settings
    return _json({"detail": {"input_size": settings.max_points, "horizon": 100}})


@bp.get("/v2/models")
@uncounted
def models() -> Response:
    return _json({"models": [{"name": name} for name in (*MODEL_IDS, *DETECTOR_IDS)]})


_REFUSED = {
    "finetune": "Fine-tuning",
    "finetuned_models": "Fine-tuning",
    "simulate": "Simulating sample paths (simulate)",
    "explain": "Feature explanations (explain)",
}


_ROUTES = {"forecast": "POST", "cross_validation": "POST", "anomaly_detection": "POST",
           "online_anomaly_detection": "POST", "models": "GET"}


@bp.route("/v2/<path:rest>", methods=["GET", "POST", "DELETE"])
@requires("read")
def refused(rest: str) -> Response:
    allowed = _ROUTES.get(rest)
    if allowed is not None:  # a route of this door asked with another method
        wrong = NixtlaError(f"{request.method} is not allowed on /v2/{rest}: use {allowed}.", status=405,
                            code="METHOD_NOT_ALLOWED")
        wrong.headers["Allow"] = allowed
        raise wrong
    feature = _REFUSED.get(rest.split("/")[0])
    if feature is None:
        raise NixtlaError(f"No such route: /v2/{rest[:64]}.", status=404, code="NOT_FOUND")
    raise unsupported(feature)

