#!/usr/bin/env bash
# vgpuctl as a platform engineer uses it on a node, against the real kernel in the VM lab:
# create/list/remove, the VFIO group node, and one clear stderr line for each kernel refusal.
# usage: vgpuctl_cli_vm_test.sh VGPUCTL   (run through tests/vm/run-in-vm.sh)
set -o errexit -o nounset -o pipefail

vgpuctl=${1:?usage: $0 VGPUCTL}
[[ -d /sys/class/mdev_bus/mtty ]] || {
  echo "no mtty parent: run me inside the VM lab (tests/vm/run-in-vm.sh)" >&2
  exit 1
}

failures=0
checks=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
pass() { echo "ok:   $*"; }

remove_all() {
  local dev
  for dev in /sys/bus/mdev/devices/*; do
    [[ -e $dev ]] && echo 1 >"$dev/remove"
  done
  return 0
}

# run NAME WANT_EXIT STDERR_REGEX -- ARGS...: one vgpuctl call; checks exit code, that stderr is
# exactly one line matching the regex on failure (empty on success), and that a failure changed
# no mdev.
# Process starts are slow under emulation: everything but vgpuctl itself is a bash builtin.
err_file=$(mktemp)
trap 'rm -f "$err_file"' EXIT
out=""
run() {
  local name=$1 want_exit=$2 want_err=$3
  shift 4
  checks=$((checks + 1))
  local before=(/sys/bus/mdev/devices/*) after rc=0 err_lines err
  out=$("$vgpuctl" "$@" 2>"$err_file") || rc=$?
  mapfile -t err_lines <"$err_file"
  err="${err_lines[*]}"
  after=(/sys/bus/mdev/devices/*)
  if [[ $rc -ne $want_exit ]]; then
    fail "$name: exit $rc, want $want_exit (stderr: $err)"
  elif [[ $want_exit -ne 0 && (${#err_lines[@]} -ne 1 || ! $err =~ $want_err) ]]; then
    fail "$name: stderr '$err' (${#err_lines[@]} lines), want one line matching /$want_err/"
  elif [[ $want_exit -eq 0 && -n $err ]]; then
    fail "$name: unexpected stderr '$err'"
  elif [[ $want_exit -ne 0 && "${before[*]}" != "${after[*]}" ]]; then
    fail "$name: a failed call changed the mdevs"
  else
    pass "$name${err:+ -> $err}"
  fi
}

remove_all

# --- create, list, remove ----------------------------------------------------------------------
run "create mtty-2" 0 "" -- create --parent mtty --type mtty-2
uuid=$out
checks=$((checks + 1))
if [[ $uuid =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$ && -d /sys/bus/mdev/devices/$uuid ]]; then
  pass "create printed the UUID of a device the kernel shows"
else
  fail "create printed '$uuid'"
fi
group=$(readlink "/sys/bus/mdev/devices/$uuid/iommu_group")
group=${group##*/}

run "list" 0 "" -- list
checks=$((checks + 1))
if grep -Eq "^$uuid +mdev +mtty +mtty +mtty-2 +Dual port serial +$group +/dev/vfio/$group\$" <<<"$out"; then
  pass "list shows uuid, flavour, parent, gpu, type, name, group and VFIO path"
else
  fail "list does not show $uuid as expected:"$'\n'"$out"
fi
checks=$((checks + 1))
if [[ -c /dev/vfio/$group ]]; then
  pass "/dev/vfio/$group is a character device"
else
  fail "/dev/vfio/$group is not a character device"
fi

run "types" 0 "" -- types
checks=$((checks + 1))
if grep -Eq '^mtty +mtty +mdev +mtty-1 +22 +Single port serial' <<<"$out" &&
  grep -Eq '^mtty +mtty +mdev +mtty-2 +11 +Dual port serial' <<<"$out" &&
  [[ $(grep -Ec '^(mtty|mdpy|mbochs) ' <<<"$out") -eq 8 ]]; then
  pass "types shows all 8 sample types, with the shared mtty pool after one mtty-2"
else
  fail "types:"$'\n'"$out"
fi

run "create with a chosen upper-case UUID" 0 "" -- create --parent mdpy --type mdpy-vga \
  --uuid 0B3F1C2D-4E5F-4A6B-8C7D-9E0F1A2B3C4D
checks=$((checks + 1))
if [[ $out == 0b3f1c2d-4e5f-4a6b-8c7d-9e0f1a2b3c4d ]]; then
  pass "UUID printed as the kernel names it"
else
  fail "create printed '$out'"
fi

# --- every kernel refusal: exit 1, one line that says what happened ------------------------------
run "malformed UUID" 1 "is not a UUID" -- create --parent mtty --type mtty-1 --uuid not-a-uuid
run "duplicate UUID, same type (EEXIST)" 1 "already exists.*File exists" -- \
  create --parent mtty --type mtty-2 --uuid "$uuid"
run "duplicate UUID, other type (EEXIST)" 1 "already exists.*File exists" -- \
  create --parent mtty --type mtty-1 --uuid "$uuid"
run "duplicate UUID, other parent (EEXIST)" 1 "already exists.*File exists" -- \
  create --parent mbochs --type mbochs-small --uuid "$uuid"
run "unknown type" 1 "has no type 'mtty-9'" -- create --parent mtty --type mtty-9
run "unknown parent" 1 "no vGPU-capable parent '0000:00:42.0'" -- \
  create --parent 0000:00:42.0 --type mtty-1
run "remove" 0 "" -- remove "$uuid"
run "remove again: gone (ENOENT)" 1 "no vGPU $uuid .*No such file or directory" -- remove "$uuid"
run "remove a non-UUID" 1 "neither an mdev UUID" -- remove mtty

# Filling a parent is not the subject here: raw sysfs writes are quicker than a process each.
fill() {
  local type_dir=/sys/class/mdev_bus/$1/mdev_supported_types/$2 available uuid
  while read -r available <"$type_dir/available_instances" && [[ $available -gt 0 ]]; do
    read -r uuid </proc/sys/kernel/random/uuid
    echo "$uuid" >"$type_dir/create"
  done
}

remove_all
fill mtty mtty-1
run "mtty full (ENOSPC)" 1 "no room for another mtty-1 on mtty.*No space left on device" -- \
  create --parent mtty --type mtty-1
run "mtty-2 on a full pool (ENOSPC)" 1 "no room for another mtty-2 on mtty.*No space left on device" -- \
  create --parent mtty --type mtty-2
fill mdpy mdpy-hd
run "mdpy at max_instances (EUSERS)" 1 "no room for another mdpy-hd on mdpy.*Too many users" -- \
  create --parent mdpy --type mdpy-hd

# --- usage errors -------------------------------------------------------------------------------
run "create without --type" 2 "type" -- create --parent mtty
run "unknown subcommand" 2 "." -- frobnicate

remove_all
echo "$((checks - failures))/$checks checks passed"
[[ $failures -eq 0 ]]
