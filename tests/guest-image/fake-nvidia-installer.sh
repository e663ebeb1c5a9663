#!/bin/sh
# Stand-in for an NVIDIA GRID guest driver .run file, which cannot be shipped or downloaded.
# It behaves like nvidia-installer where build.sh depends on it:
# - every argument is recorded, one per line, in $FAKE_NVIDIA_ARGS (if set);
# - an option nvidia-installer does not define is an error (option names from nvidia-installer's
#   option_table.h), as is a string option without a value;
# - without --silent or --no-questions it would ask questions: with no terminal it fails;
# - --kernel-source-path must be a configured tree whose include/generated/utsrelease.h names
#   --kernel-name, else "Unable to find the kernel source tree";
# - it compiles nvidia.ko, nvidia-modeset.ko and nvidia-uvm.ko (real ELF objects with .modinfo
#   and an exported symbol, so depmod finds uvm -> nvidia) into --kernel-install-path, and puts
#   utilities and libraries under --utility-prefix / --opengl-prefix;
# - FAKE_NVIDIA_FAIL=1 makes the module build fail after some files were written, as a
#   compiler error would.
set -eu

if [ -n "${FAKE_NVIDIA_ARGS:-}" ]; then
  : >"$FAKE_NVIDIA_ARGS"
  for arg in "$@"; do printf '%s\n' "$arg" >>"$FAKE_NVIDIA_ARGS"; done
fi

version=550.90.07
flags=" silent no-questions accept-license no-kernel-module-source no-install-libglvnd install-libglvnd
  no-install-compat32-libs install-compat32-libs no-opengl-files no-wine-files no-drm no-peermem
  no-x-check no-nouveau-check no-distro-scripts no-rpms no-backup no-check-for-alternate-installs
  no-systemd systemd skip-depmod no-precompiled-interface no-nvidia-modprobe no-unified-memory
  no-kernel-module dkms "
strings=" kernel-name kernel-source-path kernel-output-path kernel-install-path utility-prefix
  utility-libdir opengl-prefix opengl-libdir x-prefix x-library-path x-module-path
  x-sysconfig-path documentation-prefix application-profile-path glvnd-egl-config-path
  egl-external-platform-config-path log-file-name tmpdir ui compat32-prefix compat32-libdir "

# One line each, so that every name is surrounded by spaces.
flags=$(printf '%s' "$flags" | tr '\n' ' ') strings=$(printf '%s' "$strings" | tr '\n' ' ')
flags=" $flags " strings=" $strings "

fail() {
  echo "ERROR: $*" >&2
  [ -z "${log:-}" ] || echo "ERROR: $*" >>"$log"
  exit 1
}

quiet=0 kname='' ksrc='' kinstall='' uprefix='' ulibdir=lib oprefix='' olibdir=lib log=''
for arg in "$@"; do
  case $arg in
  --*=*)
    name=${arg%%=*} name=${name#--} value=${arg#*=}
    case $strings in *" $name "*) ;; *) fail "Unrecognized option: '--$name'" ;; esac
    [ -n "$value" ] || fail "option '--$name' requires an argument"
    case $name in
    kernel-name) kname=$value ;;
    kernel-source-path) ksrc=$value ;;
    kernel-install-path) kinstall=$value ;;
    utility-prefix) uprefix=$value ;;
    utility-libdir) ulibdir=$value ;;
    opengl-prefix) oprefix=$value ;;
    opengl-libdir) olibdir=$value ;;
    log-file-name) log=$value ;;
    esac
    ;;
  --*)
    name=${arg#--}
    case $flags in *" $name "*) ;; *)
      case $strings in *" $name "*) fail "option '--$name' requires an argument" ;; esac
      fail "Unrecognized option: '--$name'"
      ;;
    esac
    case $name in silent | no-questions) quiet=1 ;; esac
    ;;
  *) fail "Unrecognized argument: '$arg'" ;;
  esac
done

[ -z "$log" ] || { mkdir -p "$(dirname "$log")" && echo "nvidia-installer log file '$log'" >"$log"; }
[ "$quiet" -eq 1 ] || fail "the installer would ask questions and there is no terminal"
[ -n "$kname" ] || kname=$(uname -r)
[ -n "$ksrc" ] || ksrc=/lib/modules/$kname/build
grep -qs "\"$kname\"" "$ksrc/include/generated/utsrelease.h" ||
  fail "Unable to find the kernel source tree for the currently running kernel ($kname) in $ksrc"
[ -n "$kinstall" ] || kinstall=/lib/modules/$kname/kernel/drivers/video
[ -n "$uprefix" ] || uprefix=/usr
[ -n "$oprefix" ] || oprefix=/usr

mkdir -p "$uprefix/bin" "$uprefix/$ulibdir" "$oprefix/$olibdir" "$kinstall"
for tool in nvidia-smi nvidia-gridd nvidia-modprobe nvidia-debugdump nvidia-installer nvidia-uninstall; do
  printf '#!/bin/sh\necho "%s %s"\n' "$tool" "$version" >"$uprefix/bin/$tool"
  chmod 0755 "$uprefix/bin/$tool"
done
for lib in libnvidia-ml libcuda libnvidia-ptxjitcompiler; do
  printf 'fake %s %s\n' "$lib" "$version" >"$oprefix/$olibdir/$lib.so.$version"
  ln -sf "$lib.so.$version" "$oprefix/$olibdir/$lib.so.1"
done
[ "${FAKE_NVIDIA_FAIL:-0}" != 1 ] || fail "Unable to build the NVIDIA kernel module (see $log)"

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
modinfo() { printf '__attribute__((section(".modinfo"), used)) static const char m%s[] = "%s";\n' "$1" "$2"; }
{
  echo 'int nvidia_register(void) { return 0; }'
  echo '__attribute__((section("__ksymtab_strings"), used)) static const char s[] = "nvidia_register";'
  echo '__attribute__((used)) const void *__ksymtab_nvidia_register = (const void *)nvidia_register;'
  modinfo 1 "name=nvidia"
  modinfo 2 "version=$version"
  modinfo 3 "vermagic=$kname SMP mod_unload "
} >"$build/nvidia.c"
for module in nvidia-modeset nvidia-uvm; do
  {
    echo 'extern int nvidia_register(void);'
    echo 'int init(void) { return nvidia_register(); }'
    modinfo 1 "name=$(echo "$module" | tr - _)"
    modinfo 2 "depends=nvidia"
    modinfo 3 "vermagic=$kname SMP mod_unload "
  } >"$build/$module.c"
done
for module in nvidia nvidia-modeset nvidia-uvm; do
  cc -c "$build/$module.c" -o "$kinstall/$module.ko"
done
[ -z "$log" ] || echo "Installation of the NVIDIA Accelerated Graphics Driver for Linux-x86_64 (version: $version) is now complete." >>"$log"
