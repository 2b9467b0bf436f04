#!/bin/bash
# usage: report.sh TAG -> TAG.report: self shares of the read phase (samples with Producer in their stack, first to last)
t=$1
w=$(perf script -F time,ip,sym -i $t.perf 2>/dev/null | python3 window.py)
echo "window $w" > $t.report
perf report -i $t.perf --no-children --time ${w} --sort sym --stdio -g none 2>/dev/null | grep -v "^$" | head -60 >> $t.report
