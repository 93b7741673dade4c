"""kopf's session to the API server, as the operator's login builds it: kopf's credentials, and
a bound on its connections that its watches always fit within."""

from __future__ import annotations

import asyncio

import kopf
import pytest

from kafka_mirror.controller.handlers import API_CONNECTIONS, api_session


@pytest.mark.parametrize(("namespaces", "watches"), [(0, 2), (1, 2), (5, 10)])
def test_the_session_bounds_its_connections_above_the_watches(
    namespaces: int, watches: int
) -> None:
    info = kopf.ConnectionInfo(
        server="https://api.example:6443", token="t0ken", default_namespace="team", priority=3
    )

    async def built() -> tuple[kopf.AiohttpSession, int, str | None]:
        session = api_session(info, namespaces)
        try:
            connector = session.aiohttp_session.connector
            assert connector is not None
            return session, connector.limit, session.aiohttp_session.headers.get("Authorization")
        finally:
            await session.aiohttp_session.close()

    session, limit, authorization = asyncio.run(built())
    assert limit == watches + API_CONNECTIONS
    assert authorization == "Bearer t0ken"  # kopf's credentials, not a session without them
    assert (session.server, session.default_namespace, session.priority) == (
        "https://api.example:6443",
        "team",
        3,
    )
