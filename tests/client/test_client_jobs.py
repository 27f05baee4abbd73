"""Issue 13 with issue 12's client: submit / wait / cancel of asynchronous jobs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.api import docs
from tests.client.conftest import CLIENT_SRC  # noqa: F401  (puts the client on sys.path)
from tests.distributed.nets import mlp_verify_request

from netgrad import errors  # noqa: E402  isort: skip
from netgrad.client import (  # noqa: E402  isort: skip
    AsyncClient, Client, job_request, random_input, run_request, tensor_input, verify_request)
from netgrad.proto import netgrad_pb2  # noqa: E402  isort: skip

MLP_INPUTS = [random_input("data", [2, 4], seed=1), random_input("fc_w", [3, 4], seed=2),
              tensor_input("fc_b", [3], [0.1, -0.2, 0.3])]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_submit_then_wait_gives_what_the_synchronous_route_gives(server_url: str,
                                                                 encoding: Any) -> None:
    seen: list[str] = []
    with Client(server_url, encoding=encoding) as c:
        job = c.submit_verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS, mode="full")
        assert job.status == "queued" and job.kind == "verify" and job.id
        result = c.wait(job, timeout=60, poll_interval=0.05,
                        on_status=lambda s: seen.append(s.status))
        sync = c.verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS, mode="full")
        ran = c.wait(c.submit_run(docs.IF_TUTORIAL_NET, ["z", "y_grad"], ys=["z"],
                                  inputs=[tensor_input("x", [], [0.5], "float32")]).id,
                     timeout=60, poll_interval=0.05)
    assert isinstance(result, netgrad_pb2.VerifyResponse)
    assert result == sync and result.report.passed
    assert seen[-1] == "done"
    assert {o.blob: list(o.tensor.data) for o in ran.outputs} == {"z": [16.0],
                                                                 "y_grad": [8.0]}


#: An init net writing a blob the MLP does not read: only running it tells that the MLP's
#: weights are still missing, so a job with it is queued and fails when it runs.
UNRELATED_INIT = {"op": [{"type": "ConstantFill", "output": ["unrelated"],
                          "arg": [{"name": "shape", "ints": [1]}]}]}


def test_a_failed_job_raises_the_synchronous_routes_typed_error(server_url: str) -> None:
    with Client(server_url) as c:
        with pytest.raises(errors.BadRequestError) as sync:
            c.verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS[:1], init_net=UNRELATED_INIT)
        job = c.submit_verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS[:1],
                              init_net=UNRELATED_INIT)
        with pytest.raises(errors.BadRequestError) as failed:
            c.wait(job, timeout=60, poll_interval=0.05)
    assert failed.value.code == sync.value.code
    assert [e.blobs for e in failed.value.errors] == [e.blobs for e in sync.value.errors]
    assert failed.value.errors  # the missing inputs are named


def test_a_job_missing_inputs_is_refused_with_the_synchronous_routes_error(
        server_url: str) -> None:
    with Client(server_url) as c:  # (no init net: the missing inputs are known at once)
        with pytest.raises(errors.BadRequestError) as sync:
            c.verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS[:1])
        with pytest.raises(errors.BadRequestError) as refused:
            c.submit_verify(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS[:1])
    assert refused.value.code == sync.value.code
    assert [e.blobs for e in refused.value.errors] == [e.blobs for e in sync.value.errors]


def test_timeout_then_cancel_then_wait_raises_cancelled(server_url: str) -> None:
    long = mlp_verify_request(batch=1000)  # one worker: a single job of some seconds
    with Client(server_url) as c:
        job = c.submit(verify_request(long["net"], long["ys"], inputs=long["inputs"],
                                      mode="full"))
        with pytest.raises(errors.JobTimeoutError) as slow:
            c.wait(job, timeout=0.1, poll_interval=0.05)
        assert isinstance(slow.value, TimeoutError) and slow.value.job_id == job.id
        assert c.cancel(job).status == "cancelled"
        with pytest.raises(errors.JobCancelledError):
            c.wait(job.id, timeout=30)


def test_unknown_job_and_bad_ids(server_url: str) -> None:
    with Client(server_url) as c:
        with pytest.raises(errors.NotFoundError):
            c.job("0" * 32)
        with pytest.raises(errors.NotFoundError):
            c.cancel("0" * 32)
        with pytest.raises(ValueError):
            c.job("../v1/run")
    with pytest.raises(TypeError):
        job_request(netgrad_pb2.OpGradientRequest())


def test_async_submit_and_wait(server_url: str) -> None:
    async def main() -> Any:
        async with AsyncClient(server_url, encoding="json") as c:
            job = await c.submit(run_request(docs.MLP_NET, ["prob"], inputs=MLP_INPUTS))
            return await c.wait(job, timeout=60, poll_interval=0.05)

    out = asyncio.run(main())
    assert isinstance(out, netgrad_pb2.RunResponse) and list(out.outputs[0].tensor.shape) == [2, 3]


def test_submit_takes_a_job_dict_and_refuses_other_shapes(server_url: str) -> None:
    long = mlp_verify_request(batch=2)
    with Client(server_url, encoding="json") as c:
        job = c.submit({"verify": long})
        assert job.kind == "verify" and c.wait(job, timeout=60, poll_interval=0.05).report
    with pytest.raises(TypeError):
        job_request({"net": long["net"]})
    with pytest.raises(TypeError):
        job_request([long])  # type: ignore[arg-type]
