#!/bin/bash
# usage: cats.sh DATA RECORDS: the server's (pid in DATA.pid) CPU per record by thread and by category
f=$1; r=$2; p=$(cat $f.pid)
n=$(perf script -i $f --pid $p -F comm 2>/dev/null | wc -l)
echo "$f samples=$n  us/rec=$(python3 -c "print(round($n/1999/$r*1e6,1))")"
perf report -i $f --pid $p --no-children --sort comm --stdio -g none --percentage relative 2>/dev/null | grep -v "^#" | grep -v "^$" | awk -v n=$n -v r=$r '{printf "  %-30s %5.1f us/rec\n", $2, $1*n/100/1999/r*1e6}'
perf report -i $f --pid $p --children --sort sym --stdio -g none --percentage relative 2>/dev/null | grep -E " (__GI___libc_write|__libc_recv|pwritev64|finish_task_switch.isra.0|__x64_sys_futex|__GI___writev|epoll_wait|fdatasync|crc32c::hw_x86_64::crc_u64_parallel3|copy_folio_from_iter_atomic|_copy_to_iter|mdb_txn_commit|tsblob_storage::commit::Committer::commit|__x64_sys_sched_yield|__x64_sys_clone3|tokio::runtime::scheduler::multi_thread::worker::block_in_place|_mi_page_malloc_zero)$" | awk -v n=$n -v r=$r '{printf "  %-60s %5.1f us/rec\n", $NF, $1*n/100/1999/r*1e6}'
