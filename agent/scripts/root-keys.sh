d=/root/.ssh
for f in "$d/authorized_keys" "$d/authorized_keys2"; do
if [ -f "$f" ] && [ -r "$f" ]; then
echo "@file $f"
[ "$(head -c 131073 "$f" | wc -c)" -le 131072 ] || echo "@cut $f"
head -c 131072 "$f" | grep -n -E '(^|[[:space:]])(ssh|ecdsa|sk)-[^[:space:]]+[[:space:]]+AAAA' || true
elif [ -e "$f" ]; then echo "@unreadable $f"
elif [ -x "$d" ] || { [ -x /root ] && [ ! -e "$d" ]; }; then echo "@absent $f"
else echo "@unreadable $f"; fi
done
echo @end