#!/usr/bin/env python3
"""Reads `perf script -F comm,tid,ip,sym --no-inline` output of one server and prints, per
sample share and as µs per operation (the server's CPU per operation given as PER_US):

  perfstacks.py cats FILE PER_US          samples per thread group, then per category (the
                                          first of CATS matching any frame of the stack)
  perfstacks.py incl FILE PER_US REGEX [THREAD]
                                          frames matching REGEX by inclusive share (only the
                                          samples of threads whose name holds THREAD)
  perfstacks.py kids FILE PER_US FRAME... each FRAME's inclusive share split among the frames
                                          it calls (its outermost occurrence in a stack)

Used by the pages under docs/benchmarks/ (write-1k-intel-2026-11-27 first); earlier pages
keep their own copies of such scripts (kids.py, incl.py, fold.py) as the record of how
their figures were made.
"""
import collections
import re
import sys

# Categories for `cats`, most specific first.
CATS = [
    ('fdatasync', r'sys_fdatasync|ext4_sync_file'),
    ('LMDB commit', r'mdb_txn_commit|mdb_page_flush|RwTxn.*commit'),
    ('frames pwritev', r'sys_pwritev|Gather::write_at'),
    ('write(2) (file or socket)', r'ksys_write|vfs_write'),
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


def samples(path, generic):
    """[(thread name, [frames, innermost first])]; generic arguments folded to `<>`."""
    out, cur = [], None
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        if not line.strip():
            if cur:
                out.append(cur)
            cur = None
            continue
        if not line.startswith(('\t', ' ')):
            cur = (line.split()[0], [])
            continue
        parts = line.strip().split(' ', 1)
        sym = re.sub(r' \(.*\)$', '', parts[1] if len(parts) > 1 else parts[0])
        sym = re.sub(r'\+0x[0-9a-f]+$', '', sym)
        if generic:
            sym = re.sub(r'<.*?>', '<>', sym)
        if cur:
            cur[1].append(sym)
    if cur:
        out.append(cur)
    return out


def share(n, total, per_us):
    return f'{n * 100 / total:5.1f} % {n / total * per_us:6.2f} µs'


def cats(ss, per_us):
    groups, by = collections.Counter(), collections.Counter()
    for comm, st in ss:
        g = 'workers' if 'tokio' in comm else comm
        groups[g] += 1
        c = next((name for name, pat in CATS if any(re.search(pat, f) for f in st)),
                 'rest (user)')
        by[(g, c)] += 1
    print(f'{len(ss)} samples; µs per operation at {per_us} µs')
    for g, n in groups.most_common():
        print(f'{g}: {share(n, len(ss), per_us)}')
        for (gg, c), k in sorted(by.items(), key=lambda x: -x[1]):
            if gg == g and k * 100 / len(ss) >= 0.5:
                print(f'    {c:28} {share(k, len(ss), per_us)}')


def incl(ss, per_us, pattern, thread=None):
    counts = collections.Counter()
    for comm, st in ss:
        if thread and thread not in comm:
            continue
        for f in set(st):
            if re.search(pattern, f):
                counts[f] += 1
    for f, n in counts.most_common(50):
        print(f'{share(n, len(ss), per_us)} {f[:150]}')


def kids(ss, per_us, frames):
    for t in frames:
        below, total = collections.Counter(), 0
        for _, st in ss:
            idx = [i for i, f in enumerate(st) if t in f]
            if not idx:
                continue
            i = max(idx)  # the outermost occurrence
            total += 1
            below[st[i - 1] if i > 0 else '<self>'] += 1
        print(f'\n== {t}: {share(total, len(ss), per_us)}')
        for k, c in below.most_common(16):
            print(f'   {share(c, len(ss), per_us)}  {k[:140]}')


def main(argv):
    if len(argv) < 4 or argv[1] not in ('cats', 'incl', 'kids'):
        sys.exit(__doc__)
    cmd, path, per_us = argv[1], argv[2], float(argv[3])
    # `incl` counts a frame once whatever its type arguments; the others match patterns
    # that may sit inside them (`axum::` in a tower type).
    ss = samples(path, generic=cmd == 'incl')
    if not ss:
        sys.exit(f'{path}: no samples')
    if cmd == 'cats':
        cats(ss, per_us)
    elif cmd == 'incl':
        incl(ss, per_us, argv[4] if len(argv) > 4 else '.', argv[5] if len(argv) > 5 else None)
    else:
        kids(ss, per_us, argv[4:])


if __name__ == '__main__':
    main(sys.argv)
