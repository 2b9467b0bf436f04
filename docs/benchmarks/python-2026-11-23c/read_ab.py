# range-read A/B: one process per (variant, round), reading the same stored records
import sys, time, statistics, json, tsblob
url, mode = sys.argv[1], sys.argv[2]
T0 = 1_700_000_000_000_000
SIZES = {"1MB": (1_000_000, 100), "10MB": (10_000_000, 10), "100KB": (100_000, 1000)}
if mode == "fill":
    with tsblob.Client(url) as db:
        db.create_bucket("rd", exist_ok=True)
        for name, (size, n) in SIZES.items():
            base = (bytes(range(251)) * (size // 251 + 1))[:size]
            for i in range(n):
                db.write("rd", name, i.to_bytes(8, "little") + base[8:], ts=T0 + i)
    sys.exit()
out = {}
with tsblob.Client(url) as db:
    for name, (size, n) in SIZES.items():
        t = time.perf_counter(); c = time.process_time(); k = 0
        for rec in db.query("rd", name, start=T0, stop=T0 + n):
            assert len(rec.data) == size; k += 1
        out[name] = (k / (time.perf_counter() - t), (time.process_time() - c) / k * 1e3)
print(json.dumps(out))
