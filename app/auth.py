"""Optional API keys and a per-key limit on concurrent execution jobs.

**Keys file** (``NETGRAD_API_KEYS_FILE``): one key per line, ``NAME sha256:HEX``, optionally
followed by ``max_jobs=N``; ``#`` starts a comment. Only the SHA-256 digest of a key is
stored: keys are 256-bit random tokens (``netgrad keys add NAME`` makes one and prints it
once), so a fast hash cannot be inverted and a slow password hash would buy nothing. The
file is read again when its modification time changes, so added keys work without a
restart. A configured file that cannot be read rejects every key (fails closed).

**Checking** (when a keys file is set): every ``/v1/*`` route needs ``Authorization: Bearer
<key>`` or ``X-API-Key: <key>``. No key: 401 problem+json with ``WWW-Authenticate``; an
unknown key: 403. The presented key's digest is compared with every stored digest by
:func:`hmac.compare_digest`, all of them, so the time taken says nothing about which key
nearly matched. Health routes stay open; ``/docs``, ``/redoc``, ``/openapi.json`` and
``/metrics`` too unless ``NETGRAD_PROTECT_DOCS=1``. The two ways are declared as FastAPI
security schemes (HTTP bearer, API-key header), so Swagger UI's "Authorize" button sets them.

**Per-key limit**: a key may have ``NETGRAD_KEY_MAX_JOBS`` (or its own ``max_jobs``)
verification/run jobs in flight at once: synchronous requests waiting or running, plus its
asynchronous jobs (``/v1/jobs``) queued or running; one more is answered 429 problem+json
with ``Retry-After``. :class:`KeyLimitedPool` wraps the worker pool to do it; an
asynchronous job holds its slot until it ends (done, failed, cancelled, or its driver
died), counted by the job store (:meth:`KeyLimitedPool.jobs_in_flight`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fastapi import Depends, FastAPI, Request, Security
from fastapi.responses import Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import ProblemError, problem_response
from app.observability import note_api_key

log = logging.getLogger("netgrad.auth")

KEY_PREFIX = "ng_"
_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")
#: Paths that ``NETGRAD_PROTECT_DOCS=1`` puts behind a key (health never is).
DOC_PATHS = frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json", "/metrics"})
#: ``Retry-After`` (s) of a 429 for too many jobs: a job slot frees when any job of the key
#: ends, which cannot be predicted; clients should back off from there.
RETRY_AFTER_S = 1
WWW_AUTHENTICATE = 'Bearer realm="netgrad"'


class HeaderProblem(ProblemError):
    """A :class:`~app.errors.ProblemError` whose answer carries extra headers."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str]) -> None:
        super().__init__(status, code, detail)
        self.headers = headers


@dataclass(frozen=True)
class ApiKey:
    """One stored key: its name, SHA-256 digest and own job limit (``None``: the default)."""

    name: str
    digest: bytes
    max_jobs: int | None = None


def digest_of(key: str) -> bytes:
    """SHA-256 of a presented key (UTF-8)."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def parse_keys(text: str) -> list[ApiKey]:
    """The keys of a keys file.

    Raises:
        ValueError: a line that is not ``NAME sha256:HEX [max_jobs=N]`` (names its number).
    """
    keys: list[ApiKey] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        try:
            name, hashed, *opts = parts
            if not _NAME.fullmatch(name) or not hashed.startswith("sha256:"):
                raise ValueError
            digest = bytes.fromhex(hashed[len("sha256:"):])
            if len(digest) != 32:
                raise ValueError
            max_jobs = None
            for opt in opts:
                k, _, v = opt.partition("=")
                if k != "max_jobs" or int(v) < 1:
                    raise ValueError
                max_jobs = int(v)
        except ValueError:
            raise ValueError(
                f"keys file line {number}: expected 'NAME sha256:<64 hex digits> "
                "[max_jobs=N]'"
            ) from None
        keys.append(ApiKey(name, digest, max_jobs))
    return keys


class KeyRing:
    """The keys of a keys file, re-read when the file changes (thread-safe)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._keys: list[ApiKey] = []

    def keys(self) -> list[ApiKey]:
        """The current keys (empty when the file is missing or malformed: fail closed)."""
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        with self._lock:
            if stamp != self._stamp:
                self._stamp = stamp
                self._keys = self._load() if stamp is not None else []
                if stamp is None:
                    log.error("API keys file %s cannot be read; every key is refused", self.path)
            return self._keys

    def _load(self) -> list[ApiKey]:
        try:
            return parse_keys(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.error("API keys file %s is unusable (%s); every key is refused", self.path, exc)
            return []

    def lookup(self, key: str) -> ApiKey | None:
        """The stored key equal to ``key``, compared in constant time against all."""
        digest = digest_of(key)
        found = None
        for k in self.keys():
            if hmac.compare_digest(k.digest, digest):
                found = k
        return found


def add_key(path: str | os.PathLike[str], name: str, max_jobs: int | None = None) -> str:
    """Make a new key, append ``NAME sha256:HEX`` to the keys file, return the key.

    The file is created (mode 0600) if absent.

    Raises:
        ValueError: a bad name, a name already in the file, or a malformed file.
        OSError: the file cannot be written.
    """
    if not _NAME.fullmatch(name):
        raise ValueError("a key name is 1-64 characters of letters, digits and . _ @ -")
    p = Path(path)
    existing = parse_keys(p.read_text(encoding="utf-8")) if p.exists() else []
    if any(k.name == name for k in existing):
        raise ValueError(f"a key named {name!r} exists already in {p}")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    line = f"{name} sha256:{digest_of(key).hex()}"
    if max_jobs is not None:
        line += f" max_jobs={max_jobs}"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if not existing and p.stat().st_size == 0:
            f.write("# netgrad API keys: NAME sha256:<digest> [max_jobs=N] (netgrad keys add)\n")
        f.write(line + "\n")
    return key


# -- checking --------------------------------------------------------------------------------

_current_key: ContextVar[ApiKey | None] = ContextVar("netgrad_api_key", default=None)

bearer_scheme = HTTPBearer(
    auto_error=False, scheme_name="bearer",
    description="An API key as a bearer token: `Authorization: Bearer <key>`.",
)
header_scheme = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="apiKey",
    description="An API key in the `X-API-Key` header.",
)


def current_key() -> ApiKey | None:
    """The API key the request being served was admitted with (``None`` without keys, or
    outside a request)."""
    return _current_key.get()


def _missing() -> HeaderProblem:
    return HeaderProblem(
        401, "api_key_missing",
        "this service needs an API key: send 'Authorization: Bearer <key>' or "
        "'X-API-Key: <key>' (an operator makes one with 'netgrad keys add NAME')",
        {"WWW-Authenticate": WWW_AUTHENTICATE},
    )


def _wrong() -> ProblemError:
    return ProblemError(403, "api_key_invalid",
                        "the API key is not valid here; check it, or ask the operator for one")


def check(ring: KeyRing, key: str | None) -> ApiKey:
    """The stored key matching ``key``.

    Raises:
        HeaderProblem: 401 without a key. ProblemError: 403 for an unknown key.
    """
    if not key:
        raise _missing()
    found = ring.lookup(key)
    if found is None:
        raise _wrong()
    return found


def key_dependencies(ring: KeyRing | None) -> list[Any]:
    """Route dependencies that require a key from ``ring`` (none when ``ring`` is None)."""
    if ring is None:
        return []

    async def require_key(
        bearer: HTTPAuthorizationCredentials | None = Security(bearer_scheme),  # noqa: B008
        header: str | None = Security(header_scheme),  # noqa: B008
    ) -> None:
        found = check(ring, bearer.credentials if bearer is not None else header)
        _current_key.set(found)  # async dependency: visible to the route and its threads
        note_api_key(found.name)

    return [Depends(require_key)]


def key_responses(ring: KeyRing | None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` the key check adds to a route (none without keys)."""
    if ring is None:
        return {}

    def problem(description: str) -> dict[str, Any]:
        ref = {"$ref": "#/components/schemas/Problem"}
        return {"description": description,
                "content": {"application/problem+json": {"schema": ref}}}

    return {
        401: problem("No API key: send `Authorization: Bearer <key>` or `X-API-Key`"),
        403: problem("The API key is not valid"),
        429: problem("Verification/run/jobs only: the key already has NETGRAD_KEY_MAX_JOBS "
                     "jobs in flight (requests, and /v1/jobs jobs queued or running); "
                     "retry after `Retry-After` seconds, or cancel a job"),
    }


class DocsGuard:
    """ASGI middleware: the :data:`DOC_PATHS` need a key (``NETGRAD_PROTECT_DOCS=1``)."""

    def __init__(self, app: ASGIApp, ring: KeyRing) -> None:
        self.app = app
        self.ring = ring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") in DOC_PATHS:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", [])}
            auth = headers.get("authorization", "")
            scheme, _, token = auth.partition(" ")
            key = token.strip() if scheme.lower() == "bearer" else headers.get("x-api-key")
            try:
                note_api_key(check(self.ring, key).name)
            except ProblemError as exc:
                response = _problem(exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _problem(exc: ProblemError) -> Response:
    response = problem_response(exc.status, exc.code, exc.detail, exc.problems)
    response.headers.update(getattr(exc, "headers", {}) or {})
    return response


# -- per-key job limit ---------------------------------------------------------------------


def too_many_jobs(name: str, requests: int, jobs: int, limit: int) -> HeaderProblem:
    """The 429 ``too_many_jobs`` problem (with ``Retry-After``) of key ``name``, which has
    ``requests`` synchronous requests and ``jobs`` asynchronous jobs in flight."""
    return HeaderProblem(
        429, "too_many_jobs",
        f"API key {name!r} already has {requests + jobs} verification/run jobs in flight "
        f"and its limit is {limit} ({requests} synchronous requests, {jobs} asynchronous "
        "jobs queued or running); wait for one to finish, or cancel one of its jobs "
        "(DELETE /v1/jobs/{id}), then retry",
        {"Retry-After": str(RETRY_AFTER_S)},
    )


class KeyLimitedPool:
    """A worker pool whose :meth:`submit` admits at most N jobs per API key at once.

    Every other attribute is the wrapped pool's. Jobs without a key (keys not configured)
    are not limited here.

    Args:
        pool: the worker pool (or executor backend) wrapped.
        default_max_jobs: the limit of a key without its own ``max_jobs``.
        jobs: the job store (:mod:`core.executor.jobstore`), whose queued and running jobs
            of a key count against it too (``None``: none).
    """

    def __init__(self, pool: Any, default_max_jobs: int, jobs: Any = None) -> None:
        self._pool = pool
        self._default = default_max_jobs
        self._jobs = jobs
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}

    def limit_of(self, key: ApiKey) -> int:
        """Jobs ``key`` may have in flight: its own ``max_jobs``, else the default."""
        return key.max_jobs or self._default

    def requests_in_flight(self, name: str) -> int:
        """Synchronous verification/run requests of key ``name`` waiting or running."""
        with self._lock:
            return self._in_flight.get(name, 0)

    def jobs_in_flight(self, name: str) -> int:
        """Asynchronous jobs of key ``name`` queued or running (0 without a job store, or
        when the store cannot be asked: logged, the request is not refused for it)."""
        if self._jobs is None:
            return 0
        try:
            return int(self._jobs.in_flight(name))
        except Exception:  # e.g. the Ray job store unreachable: the limit is best effort
            log.warning("could not count the jobs of API key %r", name, exc_info=True)
            return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """The wrapped pool's ``submit``, once the key of the request has a free slot.

        Raises:
            HeaderProblem: 429 ``too_many_jobs`` with ``Retry-After`` when the key has its
                limit of jobs in flight; anything the wrapped ``submit`` raises.
        """
        with self._slot():
            return self._pool.submit(fn, *args)

    def map(self, fn: Callable[..., Any], args_list: Sequence[tuple[Any, ...]],
            **kwargs: Any) -> list[Any]:
        """The executor backend's ordered ``map`` (a full-mode fan-out), as ONE job of the key.

        Raises:
            HeaderProblem: as :meth:`submit`; anything the backend's ``map`` raises.
        """
        from core.executor.backends import as_backend

        with self._slot():
            return as_backend(self._pool).map(fn, args_list, **kwargs)

    @contextlib.contextmanager
    def _slot(self) -> Iterator[None]:
        key = _current_key.get()
        if key is None or _slot_held.get():  # no key, or the request already holds its slot
            yield
            return
        limit = self.limit_of(key)
        jobs = self.jobs_in_flight(key.name)  # outside the lock: may ask the Ray store
        with self._lock:
            n = self._in_flight.get(key.name, 0)
            if n + jobs >= limit:
                raise too_many_jobs(key.name, n, jobs, limit)
            self._in_flight[key.name] = n + 1
        token = _slot_held.set(True)
        try:
            yield
        finally:
            _slot_held.reset(token)
            with self._lock:
                self._in_flight[key.name] -= 1


#: Whether the current request holds its key's job slot (its executor jobs then take none).
_slot_held: ContextVar[bool] = ContextVar("netgrad_key_slot_held", default=False)


def request_job_slot(pool: Any) -> contextlib.AbstractContextManager[None]:
    """The API key's job slot for this request, taken BEFORE it queues for a worker.

    A request waiting in the admission queue (:mod:`app.api.admission`) counts against its
    key, so a key past its limit gets the 429 at once instead of queueing.

    Raises:
        HeaderProblem: 429 ``too_many_jobs`` (see :meth:`KeyLimitedPool.submit`).
    """
    if isinstance(pool, KeyLimitedPool):
        return pool._slot()
    return contextlib.nullcontext()


@dataclass(frozen=True)
class JobAllowance:
    """What the request's key may still queue with ``POST /v1/jobs``.

    Attributes:
        owner: the key's name, which will own the job (``None`` without keys).
        limit: the key's limit of jobs in flight (``None``: not limited).
        requests: its synchronous verification/run requests in flight now.
    """

    owner: str | None = None
    limit: int | None = None
    requests: int = 0

    @property
    def max_owned(self) -> int | None:
        """Most jobs of the owner queued or running, the new one included (``None``: any)."""
        return None if self.limit is None else self.limit - self.requests

    def refusal(self, jobs: int) -> HeaderProblem:
        """The 429 when the owner has ``jobs`` asynchronous jobs queued or running."""
        return too_many_jobs(self.owner or "", self.requests, jobs, self.limit or 0)


def job_allowance(pool: Any) -> JobAllowance:
    """The :class:`JobAllowance` of the request being served (no owner without keys; no
    limit when ``pool`` does not limit keys)."""
    key = _current_key.get()
    if key is None:
        return JobAllowance()
    if not isinstance(pool, KeyLimitedPool):
        return JobAllowance(key.name)
    return JobAllowance(key.name, pool.limit_of(key), pool.requests_in_flight(key.name))


def install_handlers(app: FastAPI) -> None:
    """Answer :class:`HeaderProblem` with its headers."""

    async def on_header_problem(_: Request, exc: Exception) -> Response:
        return _problem(cast(HeaderProblem, exc))

    app.add_exception_handler(HeaderProblem, on_header_problem)
