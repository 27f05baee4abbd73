"""Typed client of the netgrad service, sync (:class:`Client`) and async (:class:`AsyncClient`).

Both take Caffe2 messages (``netgrad.proto.caffe2_pb2`` or any class of the same message,
e.g. the server's ``api_schemas``) or dicts in the service's JSON form, send binary protobuf
by default (``encoding="json"`` sends and reads JSON), and return the typed
``netgrad.v1`` response messages (``netgrad.proto.netgrad_pb2``). A refusal raises a
:class:`netgrad.errors.ProblemError` subclass carrying the problem's ``errors`` list (401
:class:`~netgrad.errors.AuthenticationError`, 403 :class:`~netgrad.errors.PermissionDeniedError`,
429 :class:`~netgrad.errors.RateLimitedError` with ``retry_after``, ...); a connection failure
raises :class:`netgrad.errors.TransportError`. A service with API keys
(``NETGRAD_API_KEYS_FILE``) needs ``api_key=`` (or the ``NETGRAD_API_KEY`` environment
variable), sent as ``Authorization: Bearer <key>``.

Example::

    from netgrad.client import Client, random_input

    with Client("http://127.0.0.1:8000") as c:
        res = c.gradients_net(net, ["prob"])
        rep = c.verify(net, ["prob"], inputs=[random_input("data", [2, 4])]).report
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import httpx
from google.protobuf.message import DecodeError, Message

from netgrad._json import from_json, to_json
from netgrad.builders import (
    GradientLike,
    InputLike,
    JobResult,
    NetLike,
    OpLike,
    YsLike,
    as_message,
    job_outcome,
    job_request,
    net_request,
    op_request,
    random_input,
    run_request,
    tensor_input,
    verify_request,
)
from netgrad.errors import (
    JobTimeoutError,
    NetgradError,
    TransportError,
    error_for,
)
from netgrad.proto import netgrad_pb2

M = TypeVar("M", bound=Message)
Encoding = Literal["protobuf", "json"]

DEFAULT_URL = "http://127.0.0.1:8000"
PROTOBUF = "application/protobuf"
JSON = "application/json"
#: Environment variable read for the API key when ``api_key`` is not given.
API_KEY_ENV = "NETGRAD_API_KEY"
#: Called with each status ``wait`` polls (e.g. to show ``progress.done / progress.total``).
OnStatus = Callable[[netgrad_pb2.JobStatus], None]
#: Statuses after which a job changes no more.
FINISHED = ("done", "failed", "cancelled")


def _job_id(job: netgrad_pb2.JobStatus | str) -> str:
    job_id = job if isinstance(job, str) else job.id
    if not job_id or "/" in job_id:
        raise ValueError(f"not a job id: {job_id!r}")
    return job_id


def auth_headers(api_key: str | None = None,
                 headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """Headers sent with every request: ``headers``, plus ``Authorization: Bearer <key>``
    for ``api_key`` (default: the ``NETGRAD_API_KEY`` environment variable; ``""`` sends no
    key). An ``Authorization`` in ``headers`` wins over the key."""
    out = dict(headers or {})
    key = os.environ.get(API_KEY_ENV) if api_key is None else api_key
    if key and not any(k.lower() == "authorization" for k in out):
        out["Authorization"] = f"Bearer {key}"
    return out


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header (delta-seconds form), else ``None``."""
    try:
        seconds = float(value) if value else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class _TooDeep(NetgradError):
    """A binary answer nested deeper than upb parses (the request is re-sent for JSON).

    Raised to the caller only when the JSON answer falls back to binary as well (Argument
    bytes that are not UTF-8 in an answer nested more than about 33 sub-net levels).
    """


def _json_answer(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` asking for a JSON answer (binary as the fallback the server may need)."""
    return {**headers, "Accept": f"{JSON}, {PROTOBUF};q=0.1"}


class _Base:
    def __init__(self, url: str, encoding: Encoding) -> None:
        if encoding not in ("protobuf", "json"):
            raise ValueError(f"encoding must be 'protobuf' or 'json', not {encoding!r}")
        self.url = url.rstrip("/")
        self.encoding = encoding

    def _body(self, req: Message) -> tuple[bytes, dict[str, str]]:
        if self.encoding == "protobuf":
            return (req.SerializeToString(deterministic=True),
                    {"Content-Type": PROTOBUF, "Accept": PROTOBUF})
        text = json.dumps(to_json(req), ensure_ascii=False, allow_nan=False)
        return text.encode("utf-8"), {"Content-Type": JSON, "Accept": JSON}

    @staticmethod
    def _answer(r: httpx.Response, cls: type[M]) -> M:
        if r.status_code not in (200, 202):
            try:
                doc = r.json()
            except ValueError:
                doc = {}
            raise error_for(r.status_code, doc if isinstance(doc, dict) else {},
                            _retry_after(r.headers.get("retry-after")), r.text)
        if r.headers.get("content-type", "").split(";")[0].strip() in (
                PROTOBUF, "application/x-protobuf"):
            try:
                return cls.FromString(r.content)
            except DecodeError as exc:
                # upb parses at most 100 nested messages (about 33 levels of sub-nets); the
                # server answers up to its own nesting limit
                raise _TooDeep(
                    f"the binary answer could not be decoded ({exc}): protobuf's Python "
                    "parser follows at most 100 nested messages (about 33 levels of "
                    "sub-nets)") from exc
        return from_json(r.json(), cls)


class Client(_Base):
    """Synchronous client.

    Args:
        url: base URL of the service (default ``http://127.0.0.1:8000``).
        encoding: ``"protobuf"`` (default: binary both ways, any Argument bytes survive) or
            ``"json"``.
        timeout: seconds per request (default 600: verification of a large net takes time).
        api_key: key of a service with API keys, sent as ``Authorization: Bearer <key>``
            (default: the ``NETGRAD_API_KEY`` environment variable, else none).
        headers: extra headers sent with every request (e.g. ``X-Request-ID``).
        transport: an httpx transport (tests).
    """

    def __init__(self, url: str = DEFAULT_URL, *, encoding: Encoding = "protobuf",
                 timeout: float = 600.0, api_key: str | None = None,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, encoding)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                  headers=auth_headers(api_key, headers))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _post(self, path: str, req: Message, cls: type[M]) -> M:
        content, headers = self._body(req)
        try:
            r = self._http.post(path, content=content, headers=headers)
            try:
                return self._answer(r, cls)
            except _TooDeep:  # the same (pure) request once more, the answer as JSON
                r = self._http.post(path, content=content, headers=_json_answer(headers))
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    def _get(self, path: str, cls: type[M], params: dict[str, str] | None = None) -> M:
        try:
            r = self._http.get(path, params=params, headers={"Accept": JSON})
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    def gradients_op(self, op: OpLike, g_output: Sequence[GradientLike]
                     ) -> netgrad_pb2.OpGradientResponse:
        """``POST /v1/gradients/op`` (operationId ``gradientsOp``)."""
        return self._post("/v1/gradients/op", op_request(op, g_output),
                          netgrad_pb2.OpGradientResponse)

    def gradients_net(self, net: NetLike, ys: YsLike, **kw: Any
                      ) -> netgrad_pb2.NetGradientResponse:
        """``POST /v1/gradients/net`` (``gradientsNet``); keywords as :func:`net_request`."""
        return self._post("/v1/gradients/net", net_request(net, ys, **kw),
                          netgrad_pb2.NetGradientResponse)

    def verify(self, net: NetLike, ys: YsLike, **kw: Any) -> netgrad_pb2.VerifyResponse:
        """``POST /v1/verify`` (``verify``); keywords as :func:`verify_request`."""
        return self._post("/v1/verify", verify_request(net, ys, **kw),
                          netgrad_pb2.VerifyResponse)

    def run(self, net: NetLike, fetch: Sequence[str], **kw: Any) -> netgrad_pb2.RunResponse:
        """``POST /v1/run`` (``run``); keywords as :func:`run_request`."""
        return self._post("/v1/run", run_request(net, fetch, **kw), netgrad_pb2.RunResponse)

    def _delete(self, path: str, cls: type[M]) -> M:
        try:
            r = self._http.delete(path, headers={"Accept": JSON})
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    def submit(self, req: netgrad_pb2.VerifyRequest | netgrad_pb2.RunRequest | Message
               | Mapping[str, Any]) -> netgrad_pb2.JobStatus:
        """``POST /v1/jobs`` (``submitJob``): queue a verification or a run; its status
        (``queued``, with ``id``). Build ``req`` with :func:`verify_request` or
        :func:`run_request`; then :meth:`wait`."""
        return self._post("/v1/jobs", job_request(req), netgrad_pb2.JobStatus)

    def submit_verify(self, net: NetLike, ys: YsLike, **kw: Any) -> netgrad_pb2.JobStatus:
        """:meth:`submit` of :func:`verify_request` ``(net, ys, **kw)``."""
        return self.submit(verify_request(net, ys, **kw))

    def submit_run(self, net: NetLike, fetch: Sequence[str], **kw: Any
                   ) -> netgrad_pb2.JobStatus:
        """:meth:`submit` of :func:`run_request` ``(net, fetch, **kw)``."""
        return self.submit(run_request(net, fetch, **kw))

    def job(self, job: netgrad_pb2.JobStatus | str) -> netgrad_pb2.JobStatus:
        """``GET /v1/jobs/{id}`` (``getJob``): status, progress, and the result when done.

        Raises:
            NotFoundError: no such job, or its result expired (the service's job TTL).
        """
        return self._get(f"/v1/jobs/{_job_id(job)}", netgrad_pb2.JobStatus)

    def cancel(self, job: netgrad_pb2.JobStatus | str) -> netgrad_pb2.JobStatus:
        """``DELETE /v1/jobs/{id}`` (``cancelJob``): cancel a queued or running job; its
        status (a finished job is left as it is)."""
        return self._delete(f"/v1/jobs/{_job_id(job)}", netgrad_pb2.JobStatus)

    def wait(self, job: netgrad_pb2.JobStatus | str, *, timeout: float | None = None,
             poll_interval: float = 0.5, on_status: OnStatus | None = None) -> JobResult:
        """Poll a job until it finishes; its result (``VerifyResponse`` or ``RunResponse``).

        Args:
            job: the status :meth:`submit` answered, or the job id.
            timeout: seconds to wait in all (``None``: no limit).
            poll_interval: seconds between polls.
            on_status: called with every status polled.

        Raises:
            ProblemError: the job failed (as the synchronous route would have refused).
            JobCancelledError: the job was cancelled.
            JobTimeoutError: ``timeout`` passed first (the job goes on).
            NotFoundError: no such job, or its result expired.
        """
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.job(job_id)
            if on_status is not None:
                on_status(status)
            result = job_outcome(status)
            if result is not None:
                return result
            if deadline is not None and time.monotonic() + poll_interval > deadline:
                raise JobTimeoutError(job_id, status.status, float(timeout or 0))
            time.sleep(poll_interval)

    def operators(self, status: str | None = None) -> netgrad_pb2.OperatorList:
        """``GET /v1/operators`` (``listOperators``), filtered by gradient status if given."""
        params = {"status": status} if status else None
        return self._get("/v1/operators", netgrad_pb2.OperatorList, params)

    def health(self) -> netgrad_pb2.Health:
        """``GET /healthz``."""
        return self._get("/healthz", netgrad_pb2.Health)


class AsyncClient(_Base):
    """Asynchronous client: the methods of :class:`Client`, as coroutines (same arguments)."""

    def __init__(self, url: str = DEFAULT_URL, *, encoding: Encoding = "protobuf",
                 timeout: float = 600.0, api_key: str | None = None,
                 headers: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(url, encoding)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport,
                                       headers=auth_headers(api_key, headers))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _post(self, path: str, req: Message, cls: type[M]) -> M:
        content, headers = self._body(req)
        try:
            r = await self._http.post(path, content=content, headers=headers)
            try:
                return self._answer(r, cls)
            except _TooDeep:  # the same (pure) request once more, the answer as JSON
                r = await self._http.post(path, content=content, headers=_json_answer(headers))
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    async def _get(self, path: str, cls: type[M], params: dict[str, str] | None = None) -> M:
        try:
            r = await self._http.get(path, params=params, headers={"Accept": JSON})
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    async def gradients_op(self, op: OpLike, g_output: Sequence[GradientLike]
                           ) -> netgrad_pb2.OpGradientResponse:
        """``POST /v1/gradients/op``."""
        return await self._post("/v1/gradients/op", op_request(op, g_output),
                                netgrad_pb2.OpGradientResponse)

    async def gradients_net(self, net: NetLike, ys: YsLike, **kw: Any
                            ) -> netgrad_pb2.NetGradientResponse:
        """``POST /v1/gradients/net``."""
        return await self._post("/v1/gradients/net", net_request(net, ys, **kw),
                                netgrad_pb2.NetGradientResponse)

    async def verify(self, net: NetLike, ys: YsLike, **kw: Any) -> netgrad_pb2.VerifyResponse:
        """``POST /v1/verify``."""
        return await self._post("/v1/verify", verify_request(net, ys, **kw),
                                netgrad_pb2.VerifyResponse)

    async def run(self, net: NetLike, fetch: Sequence[str], **kw: Any
                  ) -> netgrad_pb2.RunResponse:
        """``POST /v1/run``."""
        return await self._post("/v1/run", run_request(net, fetch, **kw),
                                netgrad_pb2.RunResponse)

    async def _delete(self, path: str, cls: type[M]) -> M:
        try:
            r = await self._http.delete(path, headers={"Accept": JSON})
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.url}{path}: {exc}") from exc
        return self._answer(r, cls)

    async def submit(self, req: netgrad_pb2.VerifyRequest | netgrad_pb2.RunRequest | Message
                     | Mapping[str, Any]) -> netgrad_pb2.JobStatus:
        """``POST /v1/jobs``."""
        return await self._post("/v1/jobs", job_request(req), netgrad_pb2.JobStatus)

    async def submit_verify(self, net: NetLike, ys: YsLike, **kw: Any
                            ) -> netgrad_pb2.JobStatus:
        """:meth:`submit` of :func:`verify_request`."""
        return await self.submit(verify_request(net, ys, **kw))

    async def submit_run(self, net: NetLike, fetch: Sequence[str], **kw: Any
                         ) -> netgrad_pb2.JobStatus:
        """:meth:`submit` of :func:`run_request`."""
        return await self.submit(run_request(net, fetch, **kw))

    async def job(self, job: netgrad_pb2.JobStatus | str) -> netgrad_pb2.JobStatus:
        """``GET /v1/jobs/{id}``."""
        return await self._get(f"/v1/jobs/{_job_id(job)}", netgrad_pb2.JobStatus)

    async def cancel(self, job: netgrad_pb2.JobStatus | str) -> netgrad_pb2.JobStatus:
        """``DELETE /v1/jobs/{id}``."""
        return await self._delete(f"/v1/jobs/{_job_id(job)}", netgrad_pb2.JobStatus)

    async def wait(self, job: netgrad_pb2.JobStatus | str, *, timeout: float | None = None,
                   poll_interval: float = 0.5, on_status: OnStatus | None = None) -> JobResult:
        """As :meth:`Client.wait` (same errors)."""
        job_id = _job_id(job)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = await self.job(job_id)
            if on_status is not None:
                on_status(status)
            result = job_outcome(status)
            if result is not None:
                return result
            if deadline is not None and time.monotonic() + poll_interval > deadline:
                raise JobTimeoutError(job_id, status.status, float(timeout or 0))
            await asyncio.sleep(poll_interval)

    async def operators(self, status: str | None = None) -> netgrad_pb2.OperatorList:
        """``GET /v1/operators``."""
        params = {"status": status} if status else None
        return await self._get("/v1/operators", netgrad_pb2.OperatorList, params)

    async def health(self) -> netgrad_pb2.Health:
        """``GET /healthz``."""
        return await self._get("/healthz", netgrad_pb2.Health)


__all__ = ["FINISHED", "AsyncClient", "Client", "GradientLike", "InputLike", "JobResult",
           "NetLike", "OpLike", "YsLike", "as_message", "auth_headers",
           "job_outcome", "job_request", "net_request", "op_request", "random_input",
           "run_request", "tensor_input", "verify_request"]
