#!/bin/bash
# fabtune lab stand-in of coreutils `tee` (written in bash: it runs once per sysfs write).
# fabtune writes one sysfs / procfs value as `printf '%s\n' VALUE | tee FILE >/dev/null`, on a real
# host and here alike. Inside the node's sysroot ($FABTUNE_LAB_SYSROOT) this stand-in refuses what
# the kernel refuses, with the errno text tee prints and exit status 1, and leaves the file as it
# was: smp_affinity_list and smp_affinity (kernel/irq/proc.c: cpulist_parse EINVAL, a CPU >= nr_cpu_ids
# ERANGE; bitmap_parse EINVAL, EOVERFLOW; no online CPU EINVAL; either write sets both files as the kernel
# reads them back), MLNX_OFED ecn enable (0 or 1), roce_np cnp_dscp (0..63) / cnp_802p_prio
# (0..7), debugfs cc_params (a number), procfs sysctls (their ctl_table handler: run/lab/sysctl-limits,
# tuning.lab.sysroot.SYSCTLS), netdev mtu (68..9978);
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
EINVAL="Invalid argument" ERANGE="Numerical result out of range" EOVERFLOW="Value too large for defined data type"
err=
num_in() {  # num_in VALUE LO HI: a decimal in LO..HI
  [[ $1 =~ ^[0-9]{1,10}$ ]] && (( 10#$1 >= $2 && 10#$1 <= $3 ))
}
nr_cpu_ids() {  # sets n: one past the highest online CPU (every lab CPU is online)
  local online
  online=$(< "$FABTUNE_LAB_SYSROOT/sys/devices/system/cpu/online")
  n=$(( ${online##*[-,]} + 1 ))
}
cpulist_check() {  # writing CPU list $1 to smp_affinity_list (bitmap_parselist): sets err, or words[] (32-bit
  # groups, [0] = CPUs 0-31) and stores both views (affinity_store)
  local v=$1 n part lo hi used group c j parts
  words=()
  [[ -n $v ]] || { err=$EINVAL; return; }
  nr_cpu_ids
  IFS=, read -r -a parts <<< "$v"
  for part in "${parts[@]}"; do
    [[ $part =~ ^([0-9]{1,10})(-([0-9]{1,10})(:([0-9]{1,10})/([0-9]{1,10}))?)?$ ]] || { err=$EINVAL; return; }
    lo=$((10#${BASH_REMATCH[1]})); hi=$lo used=1 group=1
    [[ -n ${BASH_REMATCH[3]} ]] && hi=$((10#${BASH_REMATCH[3]}))
    [[ -n ${BASH_REMATCH[4]} ]] && used=$((10#${BASH_REMATCH[5]})) group=$((10#${BASH_REMATCH[6]}))
    (( lo <= hi && group > 0 && used <= group )) || { err=$EINVAL; return; }
    (( hi < n )) || { err=$ERANGE; return; }
    for (( c = lo; c <= hi; c += group )); do
      for (( j = c; j < c + used && j <= hi; j++ )); do (( words[j / 32] |= 1 << (j % 32) )); done
    done
  done
  affinity_store "${2%/*}" "$n"
}
mask_check() {  # writing hex mask $2 to smp_affinity $1 (lib/bitmap-str.c bitmap_parse, nmaskbits = nr_cpu_ids):
  # chunks of at most 8 hex digits parted by commas or blanks, read from the last; a chunk more than the
  # CPUs need or a bit past the last CPU: EOVERFLOW; a non-hex character: EINVAL
  local v=$2 n ng k=0 i t
  local -a toks
  words=()
  nr_cpu_ids
  ng=$(( (n + 31) / 32 ))
  IFS=$', \t' read -r -a toks <<< "$v"
  for (( i = ${#toks[@]} - 1; i >= 0; i-- )); do
    t=${toks[i]}
    [[ -n $t ]] || continue
    (( k < ng )) || { err=$EOVERFLOW; return; }
    if (( ${#t} > 8 )); then
      [[ ${t: -8} =~ ^[0-9a-fA-F]+$ && ${t: -9:1} == [0-9a-fA-F] ]] && err=$EOVERFLOW || err=$EINVAL
      return
    fi
    [[ $t =~ ^[0-9a-fA-F]+$ ]] || { err=$EINVAL; return; }
    words[k]=$(( 16#$t )); k=$(( k + 1 ))
  done
  if (( k == ng && words[ng - 1] >> (n - (ng - 1) * 32) )); then err=$EOVERFLOW; return; fi
  affinity_store "${1%/*}" "$n"
}
affinity_store() {  # affinity_store DIR N: the CPUs of words[] as the kernel reads them back, in both files:
  # smp_affinity `%*pb` (32-bit groups, the first only as wide as N needs), smp_affinity_list `%*pbl`.
  # No online CPU in the mask (kernel/irq/proc.c write_irq_affinity): EINVAL, nothing stored
  local dir=$1 n=$2 k c list= start=-1 hex lead ng=$(( ($2 + 31) / 32 ))
  for (( c = 0; c <= n; c++ )); do
    if (( c < n && (words[c / 32] >> (c % 32)) & 1 )); then (( start >= 0 )) || start=$c
    elif (( start >= 0 )); then
      if (( start == c - 1 )); then list+=${list:+,}$start; else list+=${list:+,}$start-$((c - 1)); fi
      start=-1
    fi
  done
  [[ -n $list ]] || { err=$EINVAL; return; }
  lead=$(( (n % 32 + 3) / 4 )); (( lead )) || lead=8
  printf -v hex "%0${lead}x" $(( words[ng - 1] ))
  for (( k = ng - 2; k >= 0; k-- )); do printf -v hex "%s,%08x" "$hex" $(( words[k] )); done
  printf '%s\n' "$hex" > "$dir/smp_affinity"
  printf '%s\n' "$list" > "$dir/smp_affinity_list"
  handled=1
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
sysctl_check() {  # sysctl_check FILE VALUE: the key's ctl_table handler, from run/lab/sysctl-limits
  # (tuning.lab.sysroot.node_sysctls / sysctl_store, which sysctl -w runs): int/uint N LO HI, ports, cc, str, ro
  local f=$1 v=$2 rel=${1##*proc/sys/} key kind a b c w i n names
  local -a nums cur
  kind=int a=99 b=-9223372036854775808 c=9223372036854775807
  while read -r key kind a b c; do [[ $key == "$rel" ]] && break; done < "$FABTUNE_LAB_SYSROOT/run/lab/sysctl-limits"
  [[ $key == "$rel" ]] || kind=int a=99 b=-9223372036854775808 c=9223372036854775807
  case $kind in
    ro) err="Permission denied"; return ;;
    cc)  # proc_tcp_congestion_control: a registered name, or a module it can load (then registered)
      read -r -a names < "${f%/*}/tcp_available_congestion_control"
      for w in "${names[@]}"; do [[ $v == "$w" ]] && { stored=$v; return; }; done
      for w in $a $b $c; do  # the module names (c holds all past the second)
        [[ $v == "$w" ]] && { printf '%s\n' "${names[*]} $v" > "${f%/*}/tcp_available_congestion_control"; stored=$v; return; }
      done
      err="No such file or directory"; return ;;
    str)  # a name the kernel knows or loads (net.core.default_qdisc: qdisc_set_default), else ENOENT
      v=${v#"${v%%[![:space:]]*}"}; v=${v%"${v##*[![:space:]]}"}
      for w in $a $b $c; do [[ $v == "$w" ]] && { stored=$v; return; }; done
      err="No such file or directory"; return ;;
  esac
  read -r -a nums <<< "$v"
  (( ${#nums[@]} )) || { err=$EINVAL; return; }
  read -r -a cur < "$f"
  for (( i = 0; i < ${#nums[@]} && i < a; i++ )); do
    w=${nums[i]}
    if [[ $kind == uint ]]; then [[ $w =~ ^[0-9]{1,18}$ ]] || { err=$EINVAL; return; }
    else [[ $w =~ ^-?[0-9]{1,18}$ ]] || { err=$EINVAL; return; }; fi
    if [[ $w == -* ]]; then n=$(( -10#${w#-} )); else n=$(( 10#$w )); fi
    (( n >= b && n <= c )) || { err=$EINVAL; return; }
    cur[i]=$n
  done
  (( a < 99 )) || cur=("${cur[@]:0:i}")
  if [[ $kind == ports ]] && (( cur[1] < cur[0] || cur[0] < 1024 )); then err=$EINVAL; return; fi
  local IFS=$'\t'
  stored="${cur[*]:0:a}"
}
roce_tos_check() {  # kstrtou8 base 0: 0x.. hex, 0.. octal, else decimal, an optional +; above 255 ERANGE
  local v=$1 t
  if [[ $v =~ ^\+?0[xX]([0-9a-fA-F]{1,16})$ ]]; then t=$((16#${BASH_REMATCH[1]}))
  elif [[ $v =~ ^\+?(0[0-7]{0,20})$ ]]; then t=$((8#${BASH_REMATCH[1]}))
  elif [[ $v =~ ^\+?([1-9][0-9]{0,17})$ ]]; then t=$((10#${BASH_REMATCH[1]}))
  else err=$EINVAL; return; fi
  (( t >= 0 && t <= 255 )) || { err=$ERANGE; return; }
  stored=$t
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
    # the GID table and the CPU topology: read-only attributes (kernfs: EACCES, root too), shared by
    # every lab node's sysroot (tuning/lab/sysroot_share.py)
    */infiniband/*/ports/[0-9]*/gids/*|*/infiniband/*/ports/[0-9]*/gid_attrs/*/*\
    |*/devices/system/cpu/cpu[0-9]*/topology/*) err="Permission denied" ;;
    # an IRQ's affinity: either file sets it, both read it back in the kernel's formats
    *proc/irq/*/smp_affinity_list) cpulist_check "$v" "$f" ;;
    *proc/irq/*/smp_affinity) mask_check "$f" "$v" ;;
    */ecn/roce_np/enable/[0-7]|*/ecn/roce_rp/enable/[0-7]) [[ $v == [01] ]] || err=$EINVAL ;;
    */ecn/roce_np/cnp_dscp|*/cc_params/np_cnp_dscp) num_in "$v" 0 63 || err=$EINVAL ;;
    */ecn/roce_np/cnp_802p_prio|*/cc_params/np_cnp_prio) num_in "$v" 0 7 || err=$EINVAL ;;
    */cc_params/*|*/ecn/roce_rp/*|*/ecn/roce_np/*) num_in "$v" 0 4294967295 || err=$EINVAL ;;
    *sys/class/net/*/mtu) num_in "$v" 68 9978 || err=$EINVAL ;;
    # configfs rdma_cm (cma_configfs.c): ib_cache_gid_parse_type_str, kstrtou8(buf, 0) (read back "%u")
    */kernel/config/rdma_cm/*/ports/*/default_roce_mode) [[ $v == "IB/RoCE v1" || $v == "RoCE v2" ]] || err=$EINVAL ;;
    */kernel/config/rdma_cm/*/ports/*/default_roce_tos) roce_tos_check "$v" ;;
    *proc/sys/*) sysctl_check "$f" "$v" ;;
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
