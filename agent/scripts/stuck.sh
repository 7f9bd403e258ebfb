grep -s -H -E '^[0-9]+ \(.*\) [DZ] ' /proc/[0-9]*/task/[0-9]*/stat | sed -n 's|^/proc/\([0-9][0-9]*\)/task/[0-9]*/stat:[0-9]* (.*) \([DZ]\) .*|\1 \2|p'
echo end