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
kernel_check() {  # kernel_check FILE VALUE: sets err to what the kernel answers (empty: accepted)
  local f=$1 v=${2%$'\n'}
  err=
  case $f in
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
  # open() first (EACCES on the way or on the file, ENOENT), then the kernel's store() parses the value
  if [[ ! -e $f ]] && search_denied "$f"; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
  if in_kernel_fs "$f"; then
    if [[ ! -e $f ]]; then echo "tee: $f: No such file or directory" >&2; rc=1; continue; fi
    if [[ ! -w $f ]]; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
    kernel_check "$f" "$data"
    if [[ -n $err ]]; then echo "tee: $f: $err" >&2; rc=1; continue; fi
  fi
  if [[ -e $f && ! -w $f ]]; then echo "tee: $f: Permission denied" >&2; rc=1; continue; fi
  if [[ -n $append ]]; then printf '%s' "$data" 2>/dev/null >> "$f"; else printf '%s' "$data" 2>/dev/null > "$f"; fi \
    || { echo "tee: $f: No such file or directory" >&2; rc=1; }
done
exit $rc
