printf 'now %s\n' "$(date +%s)"
printf 'boot %s %s\n' "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" "$(cut -d' ' -f1 /proc/uptime 2>/dev/null)"
s=$1; [ "$s" -gt 0 ] || s=$(( $(date +%s) - 600 ))
if out=$(journalctl -k -q -o short-unix --no-pager --since=@"$s" 2>/dev/null); then echo 'source journal'; printf '%s\n' "$out" | grep -F 'NVRM' | tail -n 1000
elif d=$(dmesg 2>/dev/null); then echo 'source dmesg'; printf '%s
' "$d" | grep -F 'NVRM' | tail -n 1000
else echo 'source none'; fi
true