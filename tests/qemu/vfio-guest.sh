#!/usr/bin/env bash
# Boot Debian's own kernel in a QEMU TCG guest with an emulated VT-d IOMMU and QEMU's `edu`
# device, and run the guest test program (tests/src/bin/vfio_guest) in it: our VFIO backend
# and DMA layer against a real kernel and a real (emulated) IOMMU.
#
# usage: tests/qemu/vfio-guest.sh GUEST_BINARY
#        tests/qemu/vfio-guest.sh --check      only check the prerequisites
#
# Needs Debian packages qemu-system-x86, linux-image-amd64, busybox-static, cpio (.ci/run installs
# them), and read access to /boot/vmlinuz-* (root on Debian). Prints the guest's test lines, then
# a closing line "N passed, N failed"; exits non-zero on any failure, a missing result, or a
# timeout. A missing prerequisite exits with status 3 and says what to install.
# HCA_QEMU_TIMEOUT (seconds, default 170) bounds the guest's run; HCA_QEMU_CONSOLE=FILE keeps
# the whole serial console log. Recipe: ../shared/reference/vfio-userspace.md §3.2.
set -euo pipefail

timeout_s=${HCA_QEMU_TIMEOUT:-170}

die() { echo "vfio-guest: $*" >&2; echo "0 passed, 1 failed"; exit 1; }
missing() { echo "vfio-guest: $*" >&2; exit 3; }

check_prerequisites() {
    command -v qemu-system-x86_64 >/dev/null || missing "qemu-system-x86_64 not found: apt-get install qemu-system-x86"
    command -v busybox >/dev/null || missing "busybox not found: apt-get install busybox-static"
    # The initramfs has no shared libraries for busybox: it must be the static build.
    if ldd "$(command -v busybox)" 2>/dev/null | grep -q '=>'; then
        missing "$(command -v busybox) is dynamically linked: apt-get install busybox-static"
    fi
    command -v cpio >/dev/null || missing "cpio not found: apt-get install cpio"
    for tool in gzip dpkg-query ldd; do
        command -v "$tool" >/dev/null || missing "$tool not found (a Debian system is assumed)"
    done
    # The kernel and modules come from the installed linux-image-amd64 metapackage, whatever
    # version it points at today.
    dpkg-query -W -f='${Status}' linux-image-amd64 2>/dev/null | grep -q "install ok installed" \
        || missing "linux-image-amd64 is not installed: apt-get install linux-image-amd64"
    kpkg=$(dpkg-query -W -f='${Depends}' linux-image-amd64 | grep -o 'linux-image-[^ ,]*' | head -n1 || true)
    [ -n "$kpkg" ] || missing "linux-image-amd64 names no kernel package: apt-get install --reinstall linux-image-amd64"
    kver=${kpkg#linux-image-}
    kernel=/boot/vmlinuz-$kver
    moddir=/lib/modules/$kver
    [ -e "$kernel" ] || missing "$kernel missing: apt-get install --reinstall $kpkg"
    [ -r "$kernel" ] || missing "cannot read $kernel: run as root (Debian installs it mode 0600)"
    [ -f "$moddir/modules.dep" ] || missing "$moddir/modules.dep missing: apt-get install --reinstall $kpkg"
}

if [ "${1:-}" = "--check" ]; then
    check_prerequisites
    echo "vfio-guest: ready (kernel $kernel)"
    exit 0
fi

guest_bin=${1:?usage: $0 GUEST_BINARY | --check}
check_prerequisites
[ -x "$guest_bin" ] || die "guest program $guest_bin is not an executable file"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,etc,lib/modules,usr/bin}

# Modules, dependencies first: modules.dep lists a module's dependencies nearest first, so
# loading them in reverse order, then the module, satisfies every symbol.
declare -A seen=()
order=()
add_module() {
    local rel=$1 line deps i
    [ -n "${seen[$rel]:-}" ] && return 0
    seen[$rel]=1
    line=$(grep -E "^${rel//./\\.}:" "$moddir/modules.dep") || die "module $rel not in modules.dep"
    deps=${line#*:}
    local -a arr=($deps)
    for ((i=${#arr[@]}-1; i>=0; i--)); do add_module "${arr[$i]}"; done
    order+=("$rel")
}
find_module() {
    grep -oE "^[^:]*/$1\.ko(\.xz|\.zst|\.gz)?:" "$moddir/modules.dep" | head -n1 | tr -d :
}
for m in vfio_iommu_type1 vfio-pci; do
    rel=$(find_module "$m") || true
    [ -n "$rel" ] || die "module $m not found in $moddir"
    add_module "$rel"
done
: > "$root/modules.order"
for rel in "${order[@]}"; do
    name=$(basename "$rel")
    case "$name" in
        *.xz)  xz -dc "$moddir/$rel" > "$root/lib/modules/${name%.xz}"; name=${name%.xz} ;;
        *.zst) zstd -qdc "$moddir/$rel" > "$root/lib/modules/${name%.zst}"; name=${name%.zst} ;;
        *.gz)  gzip -dc "$moddir/$rel" > "$root/lib/modules/${name%.gz}"; name=${name%.gz} ;;
        *)     cp "$moddir/$rel" "$root/lib/modules/$name" ;;
    esac
    echo "$name" >> "$root/modules.order"
done

# busybox and its applets.
cp "$(command -v busybox)" "$root/bin/busybox"
for applet in sh mount insmod poweroff cat echo sleep ls mkdir chmod chown dmesg grep; do
    ln -s busybox "$root/bin/$applet"
done

# The guest program and the shared libraries it needs.
cp "$guest_bin" "$root/bin/vfio-guest"
ldd "$guest_bin" | grep -oE '/[^ ]+' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done

cat > "$root/etc/passwd" <<'PW'
root:x:0:0:root:/root:/bin/sh
tester:x:1000:1000:tester:/tmp:/bin/sh
PW
echo "root:x:0:" > "$root/etc/group"; echo "tester:x:1000:" >> "$root/etc/group"

cat > "$root/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
    insmod /lib/modules/$m || echo "HARNESS: insmod $m failed"
done
# A newline first: the firmware leaves the console mid-line.
echo
echo "HARNESS: start"
/bin/vfio-guest
echo "HARNESS: exit $?"
poweroff -f
INIT
chmod +x "$root/init"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

start=$(date +%s.%N)
set +e
timeout --foreground "$timeout_s" qemu-system-x86_64 \
    -machine q35,accel=tcg -cpu max -m 512M -smp 1 -nographic -no-reboot \
    -device intel-iommu -device edu \
    -kernel "$kernel" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 intel_iommu=on panic=-1 quiet loglevel=3" \
    < /dev/null > "$work/console.log" 2>&1
qrc=$?
set -e
end=$(date +%s.%N)
[ -n "${HCA_QEMU_CONSOLE:-}" ] && cp "$work/console.log" "$HCA_QEMU_CONSOLE"

tr -d '\r' < "$work/console.log" | grep -E '^(TEST|HARNESS|GUEST|  )' || true
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "boot to result: ${elapsed} s"

summary=$(tr -d '\r' < "$work/console.log" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n1 || true)
if [ $qrc -eq 124 ]; then
    tail -n 40 "$work/console.log" >&2
    die "timed out after ${timeout_s} s"
fi
if [ -z "$summary" ]; then
    tail -n 40 "$work/console.log" >&2
    die "the guest printed no result line (qemu exit $qrc)"
fi
echo "$summary"
grep -q "HARNESS: exit 0" <(tr -d '\r' < "$work/console.log") || exit 1
case "$summary" in *" 0 failed") exit 0 ;; *) exit 1 ;; esac
