"""CPU per 1 KB POST through aiohttp alone (no SDK), with session and request options varied,
alternated in one process against a running tsblob serve. Usage: aio_options.py URL WRITES ROUNDS"""
import asyncio, time, statistics, sys, json
import aiohttp
from yarl import URL
url = sys.argv[1]; N = int(sys.argv[2]); R = int(sys.argv[3])
T0 = 1_700_000_000_000_000
data = b"x" * 1000
VARIANTS = {
  "base": dict(sess={}, req={}),
  "dummyjar": dict(sess={"cookie_jar": "DUMMY"}, req={}),
  "no_decompress": dict(sess={"auto_decompress": False}, req={}),
  "skip_auto": dict(sess={"skip_auto_headers": ("User-Agent",)}, req={}),
  "no_sock_read": dict(sess={"timeout": aiohttp.ClientTimeout(total=None, sock_connect=30)}, req={}),
  "payload": dict(sess={}, req={}, payload=True),
  "urlbuild": dict(sess={}, req={}, urlbuild=True),
}
async def run(name, v, tag):
    kw = dict(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=30), read_bufsize=1<<20, trust_env=False)
    kw.update(v["sess"])
    if kw.get("cookie_jar") == "DUMMY": kw["cookie_jar"] = aiohttp.DummyCookieJar()
    async with aiohttp.ClientSession(**kw) as s:
        base = URL(url)
        async def one(i):
            target = f"/api/v1/b/aio/{tag}?ts={T0+i}"
            u = URL.build(scheme=base.scheme, host=base.host, port=base.port, path=f"/api/v1/b/aio/{tag}", query_string=f"ts={T0+i}", encoded=True) if v.get("urlbuild") else URL(url + target, encoded=True)
            body = aiohttp.BytesPayload(data) if v.get("payload") else data
            async with s.request("POST", u, data=body, **v["req"]) as r:
                b = await r.read()
                h = [(k.lower(), x) for k, x in r.headers.items()]
                assert r.status == 201, (r.status, b)
        for i in range(100): await one(i)
        c0 = time.process_time()
        for i in range(100, 100 + N): await one(i)
        return (time.process_time() - c0) / N * 1e6
async def main():
    async with aiohttp.ClientSession() as s:
        await s.post(url + "/api/v1/b/aio", json={})
    res = {k: [] for k in VARIANTS}
    for r in range(R):
        for k, v in VARIANTS.items():
            res[k].append(await run(k, v, f"{k}-{r}-{time.time_ns()}"))
    for k, xs in res.items():
        print(f"{k:15s} {statistics.median(xs):7.1f} ({min(xs):.1f}-{max(xs):.1f}) µs CPU/write")
asyncio.run(main())
