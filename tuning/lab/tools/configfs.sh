#!/bin/bash
# fabtune lab stand-in of coreutils `mkdir` and `rmdir` (one script, called by either name): the real tool
# does the work; inside the node's configfs ($FABTUNE_LAB_SYSROOT/sys/kernel/config/rdma_cm) it then does what
# the kernel does in the same system call (drivers/infiniband/core/cma_configfs.c, SYSFS.md "RDMA-CM defaults"):
# - `mkdir rdma_cm/<dev>` of an RDMA device makes the group with ports/<p>/default_roce_mode and
#   default_roce_tos at the values the kernel keeps (run/lab/rdma_cm/<dev>.json, as
#   tuning.lab.sysroot.populate_rdma_cm), so `mkdir ... && echo 106 | tee .../default_roce_tos` works in one
#   command as on a host; a name that is no RDMA device fails with ENODEV (make_cma_dev) and leaves nothing;
# - `rmdir rdma_cm/<dev>` removes the group with its attributes (configfs drops default groups and
#   attributes with the group) and keeps its port-1 values for the next mkdir.
# Everything else is the real tool's, texts and exit status included.
set -u
tool=${0##*/}
self=${0%/*}
real=
IFS=: read -r -a dirs <<< "$PATH"
for d in "${dirs[@]}"; do  # the next one on the PATH (-ef: no fork; this runs for every mkdir of the node)
  [[ -n $d && -x $d/$tool && ! $d -ef $self ]] && { real=$d/$tool; break; }
done
[[ -n $real ]] || { echo "$tool: command not found" >&2; exit 127; }
configfs=${FABTUNE_LAB_SYSROOT:+$FABTUNE_LAB_SYSROOT/sys/kernel/config/rdma_cm}
group_dev() {  # group_dev PATH: sets dev when PATH is a group rdma_cm/<dev> of the node's configfs
  local abs=$1
  dev=
  [[ -n $configfs ]] || return 1
  [[ $abs == /* ]] || abs=$PWD/$abs
  abs=${abs//\/.\//\/}; abs=${abs%/}
  [[ ${abs%/*} == "$configfs" ]] || return 1
  dev=${abs##*/}
}
quoted() {  # the tool's own quoting of a name (coreutils: 'x' in C, curly quotes in a UTF-8 locale)
  local q
  q=$(exec -a "$tool" "$real" -- "" 2>&1)
  q=${q#*directory }; q=${q%%:*}
  printf '%s%s%s' "${q:0:1}" "$1" "${q: -1}"
}
state() { printf '%s' "$FABTUNE_LAB_SYSROOT/run/lab/rdma_cm/$1.json"; }
if [[ $tool == mkdir ]]; then
  (exec -a mkdir "$real" "$@")  # argv[0] as the caller typed it: coreutils names itself by it
  rc=$?
  [[ -n $configfs ]] || exit $rc
  for a in "$@"; do
    [[ $a == -* ]] && continue
    group_dev "$a" || continue
    [[ -d $a && ! -d $a/ports ]] || continue
    shopt -s nullglob dotglob; entries=("$a"/*); shopt -u nullglob dotglob
    (( ${#entries[@]} == 0 )) || continue
    ports=$FABTUNE_LAB_SYSROOT/sys/class/infiniband/$dev/ports
    if [[ ! -d $ports ]]; then  # make_cma_dev: no such RDMA device
      rm -rf -- "$a"
      echo "mkdir: cannot create directory $(quoted "$a"): No such device" >&2
      rc=1; continue
    fi
    json=$(< "$(state "$dev")")
    [[ $json =~ \"default_roce_mode\":\ \"([^\"]*)\" ]] && mode=${BASH_REMATCH[1]} || mode="RoCE v2"
    [[ $json =~ \"default_roce_tos\":\ ([0-9]+) ]] && tos=${BASH_REMATCH[1]} || tos=0
    for p in "$ports"/*; do
      (exec -a mkdir "$real" -p "$a/ports/${p##*/}")
      printf '%s\n' "$mode" > "$a/ports/${p##*/}/default_roce_mode"
      printf '%s\n' "$tos" > "$a/ports/${p##*/}/default_roce_tos"
    done
  done
  exit $rc
fi
# rmdir
opts=() rest=() rc=0
for a in "$@"; do
  if [[ $a == -* ]]; then opts+=("$a")
  elif group_dev "$a" && [[ -d $a/ports ]]; then
    if [[ ! -w ${a%/*} ]]; then echo "rmdir: failed to remove $(quoted "$a"): Permission denied" >&2; rc=1; continue; fi
    if [[ -f $a/ports/1/default_roce_tos ]]; then  # the kernel keeps port 1's values past rmdir
      printf '{"default_roce_mode": "%s", "default_roce_tos": %s}\n' "$(< "$a/ports/1/default_roce_mode")" \
        "$(< "$a/ports/1/default_roce_tos")" > "$(state "$dev")"
    fi
    rm -rf -- "$a"
  else rest+=("$a")
  fi
done
if (( ${#rest[@]} )) || (( $# == ${#opts[@]} )); then  # the other paths, or no operand at all: the real tool
  (exec -a rmdir "$real" "${opts[@]}" "${rest[@]}") || rc=$?
fi
exit $rc
