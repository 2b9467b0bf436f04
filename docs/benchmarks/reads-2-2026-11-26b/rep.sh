#!/bin/bash
# usage: rep.sh TAG [PATTERN] -> TAG-children.txt, TAG-self.txt over the window of samples with PATTERN (Producer) in their stack
t=$1; pat=${2:-Producer}
w=$(perf script -F time,ip,sym -i $t.perf 2>/dev/null | python3 window.py "$pat")
echo "window $w (samples with $pat in their stack)" > $t-children.txt
cp $t-children.txt $t-self.txt
perf report -i $t.perf --children --time ${w} --sort sym --stdio -g none --percent-limit 0.3 2>/dev/null | grep -v "^$" | grep -v "^#" | head -150 >> $t-children.txt
perf report -i $t.perf --no-children --time ${w} --sort sym --stdio -g none --percent-limit 0.2 2>/dev/null | grep -v "^$" | grep -v "^#" | head -80 >> $t-self.txt
