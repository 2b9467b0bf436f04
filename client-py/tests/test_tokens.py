"""Token limits through the SDK, sync and async (issue 28): ``expires_at``, ``ttl``,
``ip_allowlist``, ``rotate_token`` and ``last_access``; an expired token refused with
``TokenExpired`` on requests and on a running tail, an address outside the list with
``IpNotAllowed``."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

import tsblob
from tsblob import AsyncClient, Client

from conftest import Server

T0 = 1_650_000_000_000_000


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_limits_are_kept_and_shown(auth_server: Server) -> None:
    with auth_server.client() as admin:
        b = uniq("tok")
        admin.create_bucket(b)
        name = uniq("lim")
        at = datetime.now(timezone.utc) + timedelta(days=1)
        value = admin.create_token(name, read=[b], expires_at=at, ttl=timedelta(hours=2),
                                   ip_allowlist=["127.0.0.1", "::1"])
        t = next(t for t in admin.list_tokens() if t.name == name)
        assert t.expires_at == tsblob.to_micros(at)
        assert (t.ttl, t.ip_allowlist, t.is_expired, t.last_access) == (7200, ["127.0.0.1", "::1"], False, None)
        with Client(auth_server.url, token=value) as reader:
            me = reader.me()
            assert me.read == [b] and me.ttl == 7200 and me.last_access is not None
        # Bad limits are refused by the server (or, for a ttl that is not whole seconds,
        # before sending).
        with pytest.raises(tsblob.InvalidInput) as e:
            admin.create_token(uniq("past"), read=[b], expires_at=timedelta(seconds=-1))
        assert e.value.code == "invalid_expiry"
        with pytest.raises(tsblob.InvalidInput) as e:
            admin.create_token(uniq("net"), read=[b], ip_allowlist=["10.0.0.0/33"])
        assert e.value.code == "invalid_ip_allowlist"
        for ttl in (0, 1.5, timedelta(milliseconds=1500)):
            with pytest.raises(ValueError):
                admin.create_token(uniq("ttl"), read=[b], ttl=ttl)  # type: ignore[arg-type]
        admin.remove_token(name)


def test_expired_token_and_other_address_are_refused(auth_server: Server) -> None:
    with auth_server.client() as admin:
        b = uniq("tok")
        admin.create_bucket(b)
        admin.write(b, "e", b"x", ts=T0)
        far = admin.create_token(uniq("far"), read=[b], ip_allowlist=["203.0.113.7"])
        # Valid 5 s: time for a read and the tail's start on a loaded machine.
        brief = admin.create_token(uniq("brief"), read=[b], expires_at=timedelta(seconds=5))
        with Client(auth_server.url, token=brief) as c:
            assert c.read(b, "e", T0).data == b"x"
            # A tail opened now ends when the token expires, with the same error.
            started = time.monotonic()
            with pytest.raises(tsblob.TokenExpired) as e:
                for _ in c.tail(b, "e", heartbeat=1):
                    pass
            assert time.monotonic() - started < 10
            assert "expires_at" in e.value.message
            with pytest.raises(tsblob.TokenExpired):
                c.read(b, "e", T0)
        with Client(auth_server.url, token=far) as c:
            with pytest.raises(tsblob.IpNotAllowed) as f:
                c.read(b, "e", T0)
            assert f.value.status == 403 and "127.0.0.1" in f.value.message
            assert isinstance(f.value, tsblob.Forbidden)


async def test_rotation_async(auth_server: Server) -> None:
    async with AsyncClient(auth_server.url, token=auth_server.token) as admin:
        b = uniq("arot")
        await admin.create_bucket(b)
        name = uniq("rot")
        old = await admin.create_token(name, read=[b], ttl=60)
        new = await admin.rotate_token(name)
        assert new != old
        async with AsyncClient(auth_server.url, token=old) as c:
            with pytest.raises(tsblob.Unauthorized):
                await c.get_bucket(b)
        async with AsyncClient(auth_server.url, token=new) as c:
            me = await c.me()
            assert me.read == [b] and me.ttl == 60 and me.rotated is not None
        with pytest.raises(tsblob.TokenNotFound):
            await admin.rotate_token(uniq("nope"))
        brief = uniq("brief")
        # Valid 5 s (time for the listing on a loaded machine), then waited past.
        await admin.create_token(brief, read=[b], expires_at=timedelta(seconds=5))
        made = time.monotonic()
        tokens = {t.name: t for t in await admin.list_tokens()}
        assert tokens[brief].expires_at is not None and not tokens[brief].is_expired
        time.sleep(max(0.0, made + 5.2 - time.monotonic()))
        assert {t.name: t for t in await admin.list_tokens()}[brief].is_expired
        with pytest.raises(tsblob.InvalidInput) as e:
            await admin.rotate_token(brief)
        assert e.value.code == "expired_not_rotatable"
