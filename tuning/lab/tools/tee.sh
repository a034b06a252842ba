#!/bin/bash
# fabtune lab stand-in of coreutils `tee` (written in bash: it runs once per sysfs write).
# fabtune writes one sysfs / procfs value as `printf '%s\n' VALUE | tee FILE >/dev/null`, on a real
# host and here alike. Inside the node's sysroot ($FABTUNE_LAB_SYSROOT) this stand-in refuses what
# the kernel refuses, with the errno text tee prints and exit status 1, and leaves the file as it
# was: smp_affinity_list (kernel/irq/proc.c: cpulist_parse EINVAL, a CPU >= nr_cpu_ids ERANGE, no
# online CPU EINVAL), MLNX_OFED ecn enable (0 or 1), roce_np cnp_dscp (0..63) / cnp_802p_prio
# (0..7), debugfs cc_params (a number), procfs sysctls (numbers), netdev mtu (68..9978);
# a file the kernel does not have under proc/ or sys/ cannot be created. As open() comes first,
# a caller who may not open the file (a folder on the way not searchable, e.g. debugfs 0700, or
# the file not writable) gets "Permission denied" before any value check. Other files: plain tee.
set -u
append=
files=()
for a in "$@"; do
  case $a in
    -a|--append) append=1 ;;
    -*) ;;
    *) files+=("$a") ;;
  esac
done
IFS= read -r -d '' data || true  # all of stdin, no fork (a NUL byte ends it, as in a sysfs write)
# the node's slow-tools fault (tuning.lab.tools.SLOW_TOOLS, `fabtune lab inject NODE slow-tools S`): wait S
# seconds, then act as always (a test on a missing file: no fork while the fault is not set)
slow=${FABTUNE_LAB_SYSROOT:+$FABTUNE_LAB_SYSROOT/hw/lab-faults/slow-tools}
if [[ -n $slow && -f $slow ]] && IFS= read -r -n 32 slow < "$slow" && [[ $slow =~ ^[0-9]{1,3}(\.[0-9]{1,3})?$ ]]; then
  sleep "$slow"
fi
EINVAL="Invalid argument" ERANGE="Numerical result out of range"
err=
num_in() {  # num_in VALUE LO HI: a decimal in LO..HI
  [[ $1 =~ ^[0-9]{1,10}$ ]] && (( 10#$1 >= $2 && 10#$1 <= $3 ))
}
cpulist_check() {  # sets err to the errno of writing CPU list $1 to smp_affinity_list
  local v=$1 n online part lo hi parts
  [[ -n $v ]] || { err=$EINVAL; return; }
  online=$(< "$FABTUNE_LAB_SYSROOT/sys/devices/system/cpu/online")
  n=$(( ${online##*[-,]} + 1 ))
  IFS=, read -r -a parts <<< "$v"
  for part in "${parts[@]}"; do
    [[ $part =~ ^([0-9]{1,10})(-([0-9]{1,10})(:[0-9]+/[0-9]+)?)?$ ]] || { err=$EINVAL; return; }
    lo=$((10#${BASH_REMATCH[1]})); hi=$lo
    [[ -n ${BASH_REMATCH[3]} ]] && hi=$((10#${BASH_REMATCH[3]}))
    (( lo <= hi )) || { err=$EINVAL; return; }
    (( hi < n )) || { err=$ERANGE; return; }
  done
}
# ---- part C (kernel, power): cpufreq, cpuidle, hugetlb -----------------------------------------
# A case may set `stored` (the value the kernel keeps: cpuidle `disable` reads back 0 or 1) or write the
# file and what the kernel derives from it itself and set `handled` (hugetlb pools, meminfo).
governor_check() {  # cpufreq store_scaling_governor: sscanf(buf, "%15s") then strncasecmp with each governor
  # the policy offers (intel_pstate: performance / powersave); none matches: EINVAL. The file then reads
  # the governor's own name and a newline (show_scaling_governor), whatever case or spacing was written
  local g govs s=$2
  s=${s#"${s%%[![:space:]]*}"}; s=${s%%[[:space:]]*}; s=${s:0:15}
  [[ -n $s ]] || { err=$EINVAL; return; }
  read -r -a govs < "${1%/*}/scaling_available_governors"
  for g in "${govs[@]}"; do [[ ${s,,} == "${g,,}" ]] && { stored=$g; return; }; done
  err=$EINVAL
}
idle_disable_check() {  # cpuidle store_state_disable: kstrtouint(buf, 0); non-zero disables; reads 0 or 1
  local v=$1 n
  if [[ $v =~ ^\+?0[xX]([0-9a-fA-F]{1,8})$ ]]; then n=$((16#${BASH_REMATCH[1]}))
  elif [[ $v =~ ^\+?(0[0-7]{0,11})$ ]]; then n=$((8#${BASH_REMATCH[1]}))
  elif [[ $v =~ ^\+?([1-9][0-9]{0,9})$ ]]; then n=$((10#${BASH_REMATCH[1]}))
  else err=$EINVAL; return; fi
  (( n <= 4294967295 )) || { err=$ERANGE; return; }
  if (( n )); then stored=1; else stored=0; fi
}
mi_get() {  # mi_get FILE LABEL: a meminfo value (kB or pages)
  local line
  while IFS= read -r line; do
    [[ $line =~ ^(Node\ [0-9]+\ )?$2:\ +([0-9]+) ]] && { echo "${BASH_REMATCH[2]}"; return; }
  done < "$1"
}
mi_set() {  # mi_set FILE LABEL=VALUE...: rewrite meminfo lines in the kernel's layout (hw_cpu.kb_line)
  local file=$1 line out= label pre kv; shift
  local -A want=()
  for kv in "$@"; do want[${kv%%=*}]=${kv#*=}; done
  while IFS= read -r line; do
    if [[ $line =~ ^(Node\ [0-9]+\ )?([A-Za-z_()]+): ]] && [[ -n ${want[${BASH_REMATCH[2]}]+x} ]]; then
      pre=${BASH_REMATCH[1]} label=${BASH_REMATCH[2]}
      if [[ $label == HugePages_* && -n $pre ]]; then printf -v line '%s%-17s%5d' "$pre" "$label:" "${want[$label]}"
      elif [[ $label == HugePages_* ]]; then printf -v line '%-19s%5d' "$label:" "${want[$label]}"
      else printf -v line '%s%-16s%8d kB' "$pre" "$label:" "${want[$label]}"; fi
    fi
    out+=$line$'\n'
  done < "$file"
  printf '%s' "$out" > "$file"
}
hugetlb_store() {  # mm/hugetlb.c set_max_huge_pages for one node: kstrtoul base 10; the pool grows only as
  # far as the node's free memory goes (fewer pages, no error: read nr_hugepages back) and shrinks at once
  local f=$1 v=$2 ndir kb cur want free grant new n2=0 tlb=0 d sz c tot delta
  [[ $v =~ ^\+?0*([0-9]+)$ ]] || { err=$EINVAL; return; }
  v=${BASH_REMATCH[1]}  # above ULONG_MAX (2^64-1): _parse_integer overflows, ERANGE
  if (( ${#v} > 20 )) || [[ ${#v} == 20 && $v > 18446744073709551615 ]]; then err=$ERANGE; return; fi
  (( ${#v} > 18 )) && v=999999999999999999
  want=$((10#$v)) ndir=${f%%/hugepages/*} kb=${f%/nr_hugepages}; kb=${kb##*/hugepages-}; kb=${kb%kB}
  cur=$(< "$f") free=$(mi_get "$ndir/meminfo" MemFree) tot=$(mi_get "$ndir/meminfo" MemTotal)
  if (( want > cur )); then
    grant=$(( want - cur )); (( grant > free / kb )) && grant=$(( free / kb ))
    new=$(( cur + grant ))
  else new=$want; fi
  delta=$(( (cur - new) * kb )) free=$(( free + (cur - new) * kb ))
  printf '%s\n' "$new" > "$f"; printf '%s\n' "$new" > "${f%/*}/free_hugepages"
  c=$(< "$ndir/hugepages/hugepages-2048kB/nr_hugepages")
  mi_set "$ndir/meminfo" "MemFree=$free" "MemUsed=$(( tot - free ))" "HugePages_Total=$c" "HugePages_Free=$c"
  for d in "${ndir%/*}"/node[0-9]*/hugepages/hugepages-*kB; do
    sz=${d##*/hugepages-}; sz=${sz%kB}; c=$(< "$d/nr_hugepages")
    tlb=$(( tlb + c * sz )); [[ $sz == 2048 ]] && n2=$(( n2 + c ))
  done
  d=$FABTUNE_LAB_SYSROOT/proc/meminfo
  mi_set "$d" "MemFree=$(( $(mi_get "$d" MemFree) + delta ))" "MemAvailable=$(( $(mi_get "$d" MemAvailable) + delta ))" \
    "HugePages_Total=$n2" "HugePages_Free=$n2" "Hugetlb=$tlb"
  handled=1
}
kernel_check() {  # kernel_check FILE VALUE: sets err to what the kernel answers (empty: accepted)
  local f=$1 v=${2%$'\n'}
  err=
  case $f in
    # part C: cpufreq / cpuidle / hugetlb writes; their read-only attributes refuse even root (kernfs: EACCES)
    */cpufreq/scaling_governor) governor_check "$f" "$v" ;;
    */cpuidle/state[0-9]*/disable) idle_disable_check "$v" ;;
    */devices/system/node/node[0-9]*/hugepages/hugepages-*kB/nr_hugepages) hugetlb_store "$f" "$v" ;;
    */cpuidle/state[0-9]*/*|*/cpufreq/scaling_available_governors|*/cpufreq/scaling_driver|*/cpufreq/affected_cpus\
    |*/cpufreq/related_cpus|*/cpu/cpuidle/current_driver|*/module/intel_idle/parameters/*|*/node/node[0-9]*/meminfo\
    |*/hugepages/hugepages-*kB/*|*proc/meminfo|*proc/cmdline) err="Permission denied" ;;
    # issue 8: RDMA port counters and the link speed have no store method (kernfs: EACCES, root too)
    */infiniband/*/ports/[0-9]*/hw_counters/*|*sys/class/net/*/speed) err="Permission denied" ;;
    *proc/irq/*/smp_affinity_list) cpulist_check "$v" ;;
    *proc/irq/*/smp_affinity) [[ $v =~ ^[0-9a-fA-F]+(,[0-9a-fA-F]+)*$ ]] || err=$EINVAL ;;
    */ecn/roce_np/enable/[0-7]|*/ecn/roce_rp/enable/[0-7]) [[ $v == [01] ]] || err=$EINVAL ;;
    */ecn/roce_np/cnp_dscp|*/cc_params/np_cnp_dscp) num_in "$v" 0 63 || err=$EINVAL ;;
    */ecn/roce_np/cnp_802p_prio|*/cc_params/np_cnp_prio) num_in "$v" 0 7 || err=$EINVAL ;;
    */cc_params/*|*/ecn/roce_rp/*|*/ecn/roce_np/*) num_in "$v" 0 4294967295 || err=$EINVAL ;;
    *sys/class/net/*/mtu) num_in "$v" 68 9978 || err=$EINVAL ;;
    *proc/sys/*) [[ $v =~ ^-?[0-9]+([[:blank:]]+-?[0-9]+)*[[:blank:]]*$ ]] || err=$EINVAL ;;
  esac
}
in_kernel_fs() {  # a path under the sysroot's proc/ or sys/ (the kernel's files; no fork: runs per write)
  [[ -n ${FABTUNE_LAB_SYSROOT:-} ]] || return 1
  local abs=$1
  [[ $abs == /* ]] || abs=$PWD/$abs
  abs=${abs//\/.\//\/}
  [[ $abs == "$FABTUNE_LAB_SYSROOT"/proc/* || $abs == "$FABTUNE_LAB_SYSROOT"/sys/* ]]
}
search_denied() {  # whether open($1) fails with EACCES on the way: its deepest existing folder is not searchable
  local d=$1
  while [[ $d == */* ]]; do
    d=${d%/*}
    [[ -n $d ]] || return 1
    if [[ -e $d ]]; then [[ ! -x $d ]]; return; fi
  done
  return 1
}
rc=0
printf '%s' "$data"
for f in "${files[@]}"; do
  stored= handled=
  # open() first (EACCES on the way or on the file, ENOENT), then the kernel's store() parses the value
  if [[ ! -e $f ]] && search_denied "$f"; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
  if in_kernel_fs "$f"; then
    if [[ ! -e $f ]]; then echo "tee: $f: No such file or directory" >&2; rc=1; continue; fi
    if [[ ! -w $f ]]; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
    kernel_check "$f" "$data"
    if [[ -n $err ]]; then echo "tee: $f: $err" >&2; rc=1; continue; fi
    [[ -n $handled ]] && continue
  fi
  if [[ -e $f && ! -w $f ]]; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
  out=$data; [[ -n $stored ]] && out=$stored$'\n'
  if [[ -n $append ]]; then printf '%s' "$out" 2>/dev/null >> "$f"; else printf '%s' "$out" 2>/dev/null > "$f"; fi \
    || { echo "tee: $f: No such file or directory" >&2; rc=1; }
done
exit $rc
