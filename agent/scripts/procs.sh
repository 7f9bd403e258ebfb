for p in "$@"; do
echo "@pid $p"
echo "@stat $(od -An -v -tx1 "/proc/$p/stat" 2>/dev/null | tr -d " \n")"
grep -E "^(NSpid|Uid):" "/proc/$p/status" 2>/dev/null | sed "s/^/@status /"
echo "@ns $(readlink "/proc/$p/ns/pid" 2>/dev/null)"
echo "@cgroup $(od -An -v -tx1 "/proc/$p/cgroup" 2>/dev/null | tr -d " \n")"
done
for p in "$@"; do
echo "@cmdline $p $(head -c 8193 "/proc/$p/cmdline" 2>/dev/null | od -An -v -tx1 | tr -d " \n")"
done
s=" "
for p in "$@"; do
c=$p; n=0
while [ $n -lt 4 ]; do
q=$(sed -n "s/^PPid:[[:space:]]*//p" "/proc/$c/status" 2>/dev/null)
case "$q" in ""|*[!0-9]*|0|1) break;; esac
case "$s" in *" $q "*) break;; esac
[ "$(sed -n "s/^NSpid:.*[[:space:]]//p" "/proc/$q/status" 2>/dev/null)" = 1 ] && break
s="$s$q "
echo "@parent $p $q $(head -c 8193 "/proc/$q/cmdline" 2>/dev/null | od -An -v -tx1 | tr -d " \n")"
c=$q; n=$((n+1))
done
done
echo @done