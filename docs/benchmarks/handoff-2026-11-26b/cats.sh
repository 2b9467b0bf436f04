#!/bin/bash
# usage: cats.sh FILE.perf -> share of samples per thread, and the hand-off symbols
f=$1
perf report -i $f --no-children --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9]' 
echo "-- hand-off symbols (share of all samples), by thread"
perf report -i $f --no-children --sort comm,sym --stdio 2>/dev/null | grep -E 'finish_task_switch|futex|epoll|ep_poll|schedule|try_to_wake_up|_raw_spin_unlock_irq|eventfd|sched_yield|pthread_cond|unpark|park'
echo "-- top 25"
perf report -i $f --no-children --sort comm,sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -25
