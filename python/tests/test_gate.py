"""Gates, turns and outcomes: configured HTTP tools, the outcome contract,
coalescing, the sync entry point, and bad input."""

import asyncio
import json

import pytest

import sluice
from conftest import support_config, support_gate


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_call_is_answered_with_the_upstream_body(fake_api):
    gate = support_gate(fake_api.url)
    out = run(gate.turn().call("search_tickets", {"query": "refund"}, deadline_ms=5000))
    assert out.status == "ok"
    assert out.ok
    assert out.http_status == 200
    assert out.body == {"path": "/api/v2/search.json?query=refund", "seq": 1}
    assert out.retry_after_ms is None and out.reason is None and out.scope is None and out.hint is None
    assert [r["path"] for r in fake_api.requests()] == ["/api/v2/search.json?query=refund"]


def test_to_dict_is_the_sidecars_json(fake_api):
    gate = support_gate(fake_api.url)
    out = run(gate.call("search_tickets", {"query": "a"}))
    assert out.to_dict() == {"status": "ok", "http_status": 200, "body": {"path": "/api/v2/search.json?query=a", "seq": 1}}
    assert list(out.to_dict()) == ["status", "http_status", "body"]
    assert json.loads(out.to_json()) == out.to_dict()
    unknown = run(gate.call("no_such_tool"))
    assert unknown.to_dict() == {"status": "error", "message": 'unknown tool "no_such_tool"'}


def test_a_deferred_call_says_when_to_come_back(fake_api):
    # One per 10 s, and the deadline too short to wait for the next slot.
    gate = support_gate(fake_api.url, rate="1/10s")

    async def turn():
        t = gate.turn()
        first = await t.call("search_tickets", {"query": "a"})
        second = await t.call("search_tickets", {"query": "b"}, deadline_ms=500)
        return first, second

    first, second = run(turn())
    assert first.status == "ok"
    assert second.status == "rate_limited"
    assert second.reason == "throttled"
    assert second.scope == "api_key"
    assert 9_000 <= second.retry_after_ms <= 10_100
    assert second.hint
    # Issue 14: a deferral by one of sluice's windows names the window.
    assert set(second.to_dict()) == {"status", "scope", "reason", "retry_after_ms", "window", "hint"}
    assert second.to_dict()["window"] == "1/10s"
    assert len(fake_api.request_starts()) == 1, "the deferred call sent nothing"


def test_execute_answers_in_order_and_coalesces_identical_reads(fake_api):
    gate = support_gate(fake_api.url)
    calls = [sluice.call("search_tickets", {"query": q}) for q in ["a", "b", "a", "c", "a"]]
    outs = run(gate.turn().execute(calls))
    assert [o.body["path"].rsplit("=", 1)[1] for o in outs] == ["a", "b", "a", "c", "a"]
    paths = sorted(r["path"] for r in fake_api.requests())
    assert paths == [
        "/api/v2/search.json?query=a",
        "/api/v2/search.json?query=b",
        "/api/v2/search.json?query=c",
    ], "identical reads in one turn send one request"


def test_the_turn_cache_answers_a_repeat_but_a_new_turn_does_not(fake_api):
    gate = support_gate(fake_api.url)

    async def turns():
        turn = gate.turn()
        await turn.call("search_tickets", {"query": "a"})
        await turn.call("search_tickets", {"query": "a"})
        await gate.turn().call("search_tickets", {"query": "a"})

    run(turns())
    assert len(fake_api.request_starts()) == 2


def test_writes_are_not_coalesced_and_carry_a_json_body(fake_api):
    gate = support_gate(fake_api.url)
    outs = run(gate.turn().execute([sluice.call("create_ticket", {"subject": "x"})] * 2))
    assert [o.status for o in outs] == ["ok", "ok"]
    assert [r["method"] for r in fake_api.requests()] == ["POST", "POST"]


def test_execute_sync_runs_without_a_loop_and_inside_one(fake_api):
    gate = support_gate(fake_api.url)
    outs = gate.turn().execute_sync([sluice.call("search_tickets", {"query": "a"})])
    assert [o.status for o in outs] == ["ok"]

    async def inside():
        return gate.turn().execute_sync([sluice.call("search_tickets", {"query": "b"})])

    assert [o.status for o in run(inside())] == ["ok"]
    assert len(fake_api.request_starts()) == 2


def test_toml_text_is_a_config_too(fake_api):
    toml = f"""
        [credentials.support]
        base_url = "{fake_api.url}"
        rate = "10/1s"

        [tools.search_tickets]
        credential = "support"
        path = "/search?query={{query}}"
    """
    gate = sluice.Gate(toml)
    assert gate.credentials == {"support"}
    assert run(gate.call("search_tickets", {"query": "x"})).status == "ok"


@pytest.mark.parametrize(
    "config, field",
    [
        ({"credentials": {"support": {"rate": "0/1s"}}}, "credentials.support.rate"),
        ({"credentials": {"support": {"rate": "10/1s", "colour": "red"}}}, "credentials.support.colour"),
        ({"defaults": {"deadline": "300000000000y"}}, "defaults.deadline"),
        ({"credentials": {"support": {"max_in_flight": -1}}}, "credentials.support.max_in_flight"),
        ({"tools": {"t": {"credential": "nobody", "path": "/x"}}}, "tools.t.credential"),
        ({"credentials": {"s": {"base_url": "ftp://x"}}}, "credentials.s.base_url"),
    ],
)
def test_a_bad_config_raises_config_error_naming_the_field(config, field):
    with pytest.raises(sluice.ConfigError) as error:
        sluice.Gate(config)
    assert error.value.field == field
    assert str(error.value).startswith(field)
    assert isinstance(error.value, ValueError)


def test_a_missing_secret_is_named_but_never_shown(monkeypatch):
    monkeypatch.delenv("SLUICE_TEST_KEY", raising=False)
    config = {"credentials": {"s": {"base_url": "http://127.0.0.1:9", "secret_env": "SLUICE_TEST_KEY"}}}
    with pytest.raises(sluice.ConfigError) as error:
        sluice.Gate(config)
    assert error.value.field == "credentials.s.secret_env"
    monkeypatch.setenv("SLUICE_TEST_KEY", "sk-very-secret")
    gate = sluice.Gate(config)
    assert "sk-very-secret" not in repr(gate.credentials)


def test_broken_toml_and_wrong_types_are_config_errors():
    with pytest.raises(sluice.ConfigError, match="line 1"):
        sluice.Gate("[credentials")
    with pytest.raises(TypeError):
        sluice.Gate(42)


def test_bad_arguments_raise_value_error_or_answer_an_error(fake_api):
    gate = support_gate(fake_api.url)
    turn = gate.turn()
    for deadline in (0, -5, "soon", True, float("nan")):
        with pytest.raises(ValueError):
            turn.call("search_tickets", {"query": "a"}, deadline_ms=deadline)
    with pytest.raises(ValueError, match=r"args\[\"when\"\]"):
        turn.call("search_tickets", {"query": "a", "when": object()})
    with pytest.raises(ValueError):
        turn.execute(["search_tickets"])
    outs = run(
        turn.execute(
            [
                sluice.call("search_tickets", ["not", "an", "object"]),
                sluice.call("search_tickets", {}),
                sluice.call("search_tickets", {"query": "a"}, deadline_ms=10**30),
                sluice.call("get_ticket", {"id": ".."}),
            ]
        )
    )
    assert [o.status for o in outs] == ["error"] * 4
    assert outs[0].message == "search_tickets: args must be a JSON object"
    assert outs[1].message == 'search_tickets: missing argument "query"'
    assert "longest allowed" in outs[2].message
    assert 'cannot be empty, "." or ".."' in outs[3].message
    assert fake_api.requests() == [], "nothing was sent"


def test_a_turn_runs_each_prepared_call_once(fake_api):
    gate = support_gate(fake_api.url)
    pending = gate.turn().call("search_tickets", {"query": "a"})

    async def twice():
        await pending
        await pending

    with pytest.raises(RuntimeError, match="already awaited"):
        run(twice())


def test_a_panic_in_the_native_code_is_an_internal_error():
    from sluice import _sluice

    with pytest.raises(sluice.InternalError, match="panicked"):
        _sluice._panic_for_tests("boom")

    async def awaited():
        await _sluice._panic_for_tests_async("boom")

    with pytest.raises(sluice.InternalError, match="boom"):
        run(awaited())
