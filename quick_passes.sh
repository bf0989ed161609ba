#!/bin/bash
# Short passes between two looks of the 250 ms observer: scrubs back to back on a small
# volume, and fail+remove+add within one look. Which events appear?
. /tmp/hunt-service/lib.sh
D=$SHM/qp; rm -rf $D; write_cfg $D; start_d $D || exit 1; C="--control $D/a.ctl"
for i in 1 2 3 4 5 6; do $NBRAID scrub db $C --json > /dev/null; done
sleep 0.6
echo "6 scrubs run; events:"; $NBRAID events $C | awk '{print $2}' | sort | uniq -c
$NBRAID status $C --json | $PY -c 'import json,sys; v=json.load(sys.stdin)["volumes"][0]; print("status scrub state:", v["scrub"]["state"])'
# fail, remove, add back in quick succession
n0=$($NBRAID events $C --json | wc -l)
$NBRAID fail db d2 $C; $NBRAID remove db d2 $C; $NBRAID add db $D/d2.img $C
sleep 3
echo "fail+remove+add events:"; $NBRAID events $C | tail -n +$((n0+1))
stop_d $D
