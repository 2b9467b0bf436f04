"""Share of samples per category (first matching category in the list, any frame of the
stack), per thread group: `perf script` output of one server."""
import sys, re, collections
CATS = [
    ('fdatasync', r'sys_fdatasync|ext4_sync_file'),
    ('LMDB commit', r'mdb_txn_commit|mdb_page_flush|RwTxn.*commit'),
    ('frames pwritev', r'sys_pwritev|Gather::write_at'),
    ('file write (limit-store)', r'ksys_write|vfs_write'),
    ('index insert', r'apply_changes'),
    ('response writev/send', r'sys_writev|sys_sendmsg|sys_sendto'),
    ('recv', r'sys_recvfrom|sys_recvmsg|sys_read\b|ksys_read'),
    ('epoll_wait', r'sys_epoll_wait|do_epoll_wait'),
    ('futex wait/wake', r'sys_futex|futex_wake|futex_wait'),
    ('sched/switch', r'finish_task_switch|__schedule|schedule\b'),
    ('other syscall', r'entry_SYSCALL|do_syscall_64'),
    ('page fault', r'asm_exc_page_fault'),
    ('alloc', r'^mi_|_mi_|mi_malloc|mi_free|__rust_alloc|__rust_dealloc|malloc|free\b'),
    ('hyper parse/encode', r'hyper::proto::h1::role|httparse'),
    ('store (other)', r'tsblob_storage'),
    ('tsblob http', r'tsblob_server::http'),
    ('axum/tower', r'axum::|tower::'),
]
samples = []; cur = None
for line in open(sys.argv[1], errors='replace'):
    line = line.rstrip('\n')
    if not line.strip():
        if cur: samples.append(cur); cur = None
        continue
    if not line.startswith(('\t', ' ')):
        cur = [line.split()[0], []]
    else:
        parts = line.strip().split(' ', 1)
        sym = parts[1] if len(parts) > 1 else parts[0]
        sym = re.sub(r' \(.*\)$', '', sym)
        cur[1].append(sym)
if cur: samples.append(cur)
N = len(samples)
per_us = float(sys.argv[2]) if len(sys.argv) > 2 else None
groups = collections.Counter(); cats = collections.Counter()
for comm, st in samples:
    g = 'workers' if 'tokio' in comm else comm
    groups[g] += 1
    c = next((name for name, pat in CATS if any(re.search(pat, f) for f in st)), 'rest (user)')
    cats[(g, c)] += 1
print(f'{N} samples' + (f'; µs per write at {per_us} µs/write' if per_us else ''))
for g, n in groups.most_common():
    print(f'{g}: {n*100/N:.1f} %' + (f' = {n/N*per_us:.1f} µs' if per_us else ''))
    for (gg, c), k in sorted(cats.items(), key=lambda x: -x[1]):
        if gg == g and k * 100 / N >= 0.5:
            print(f'    {c:28} {k*100/N:5.1f} %' + (f'  {k/N*per_us:5.1f} µs' if per_us else ''))
