"""The fault-injecting proxy (eapo.testing.FaultProxy) in front of the local test server, with the judge's
real client: what each fault does to a request, measured at the client and at the proxy. The same
proxy stands in front of vLLM in tests/rewards/test_judge_vllm.py."""

from __future__ import annotations

import time

import pytest

from eapo.rewards import make_reward
from eapo.testing import Fault, FaultProxy, JudgeServer

COMPLETION = "<think>Epigastric pain after meals suggests gastritis.</think><advice>Take omeprazole.</advice>"


def judge_for(proxy: FaultProxy, **options):
    defaults = dict(
        base_url=proxy.base_url,
        model="test-judge",
        api_key_env=None,
        timeout=0.3,
        max_retries=0,
        backoff_base=0.01,
        backoff_max=5.0,
        structured_output="json_schema",
    )
    return make_reward("llm_judge", **{**defaults, **options})


def test_passes_requests_through_and_records_the_answers(judge_server: JudgeServer) -> None:
    with FaultProxy(judge_server.base_url) as proxy:
        judge = judge_for(proxy)
        try:
            assert judge.check_reachable() == ["test-judge"]
            assert judge(["q1", "q2"], [COMPLETION] * 2, ["ref"] * 2) == [pytest.approx(0.8)] * 2
        finally:
            judge.close()
        answered = proxy.answered()
    assert judge_server.request_count == 2 and judge_server.models_requests == 1
    assert sorted("q1" in e.prompt for e in answered) == [False, True]
    assert all(e.content and '"logical_coherence": 80.0' in e.content for e in answered)
    assert judge_server.requests[0]["response_format"]["type"] == "json_schema"  # the body is relayed as sent


def test_slow_answers_time_out_at_the_client_and_are_counted_abandoned(judge_server: JudgeServer) -> None:
    with FaultProxy(judge_server.base_url) as proxy:
        proxy.inject(Fault.slow(1.0))
        judge = judge_for(proxy)
        start = time.perf_counter()
        try:
            assert judge(["q1", "q2"], [COMPLETION] * 2, ["ref"] * 2) == [None, None]
            elapsed = time.perf_counter() - start
            errors = [detail["think/error"] for detail in judge.last_details]
            proxy.clear()
            assert judge(["q3"], [COMPLETION], ["ref"]) == [pytest.approx(0.8)]
        finally:
            judge.close()
        time.sleep(1.2)  # the held answers fall due
        late, abandoned = proxy.late, proxy.abandoned
    assert elapsed < 0.9  # the 0.3 s timeout, not the proxy's 1 s
    assert all(error.startswith("timeout after 0.3 s") for error in errors)
    assert judge_server.request_count == 3  # the real server answered the slow ones too
    assert (late, abandoned) == (2, 2)


def test_an_error_for_a_while_is_ridden_out_by_retries(judge_server: JudgeServer) -> None:
    with FaultProxy(judge_server.base_url) as proxy:
        proxy.inject(Fault.status(503, retry_after=0.5), for_seconds=0.3)
        judge = judge_for(proxy, max_retries=2)
        try:
            assert judge(["q1", "q2"], [COMPLETION] * 2, ["ref"] * 2) == [pytest.approx(0.8)] * 2
        finally:
            judge.close()
        statuses = dict(proxy.status_counts)
    assert statuses == {503: 2, 200: 2}  # each first attempt in the window, each retry after it
    assert judge.stats["retries"] == 2 and judge_server.request_count == 2


def test_an_error_until_cleared_scores_none() -> None:
    with JudgeServer() as server, FaultProxy(server.base_url) as proxy:
        proxy.inject(Fault.status(503))
        judge = judge_for(proxy, max_retries=1)
        try:
            assert judge(["q"], [COMPLETION], ["ref"]) == [None]
        finally:
            judge.close()
        assert server.request_count == 0 and proxy.status_counts[503] == 2
    assert "HTTP 503" in judge.last_details[0]["think/error"]
    with pytest.raises(ValueError, match="slow or status"):
        FaultProxy("http://x/v1").inject(Fault.malformed())
