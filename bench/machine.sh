#!/usr/bin/env bash
# machine.sh: the limits of this machine, as JSON lines on stdout.
#
#   bench/machine.sh            # results dir: $RESULTS_DIR or bench/results/<ts>/
#
# Measures, on the disk holding the results dir (a temporary directory under
# it, removed afterwards):
#   seq-write-fdatasync  dd if=/dev/zero bs=1M count=1024 conv=fdatasync
#                        -> mb_per_s (10^6 bytes/s, fdatasync included)
#   seq-write-sustained  dd if=/dev/zero bs=1M count=8192 conv=fdatasync
#                        -> mb_per_s: 8 GiB, more than the kernel lets wait
#                        as dirty pages, so the disk's sustained rate and
#                        not a burst into the page cache
#   write4k-dsync        dd if=/dev/zero bs=4k count=500 oflag=dsync
#                        -> ms_per_write (each 4 KiB write waits for the disk)
# and describes the CPU (model, cores) and memory.
#
# Environment: MACHINE_SEQ_MB (default 1024), MACHINE_LONG_MB (default 8192;
# 0 skips it), MACHINE_SYNC_WRITES (default 500).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
results_dir

SEQ_MB="${MACHINE_SEQ_MB:-1024}"
LONG_MB="${MACHINE_LONG_MB:-8192}"
SYNC_WRITES="${MACHINE_SYNC_WRITES:-500}"

tmp="$(mktemp -d "$RESULTS_DIR/machine.XXXXXX")"
trap 'rm -rf "$tmp"; bench_cleanup' EXIT

# dd_seconds OUT: the "copied, S s" figure of dd's last line.
dd_seconds() {
	tail -n1 <<<"$1" | sed -E 's/.*copied, ([0-9.e+-]+) s.*/\1/'
}

# seq_write SCENARIO MIB WHAT: dd MIB MiB with fdatasync, one JSON line.
seq_write() {
	local scenario=$1 mib=$2 what=$3 out secs bytes
	log "machine: $what ${mib} MiB with fdatasync in $tmp"
	out="$(LC_ALL=C dd if=/dev/zero of="$tmp/seq" bs=1M count="$mib" conv=fdatasync 2>&1)"
	secs="$(dd_seconds "$out")"
	bytes=$((mib * 1024 * 1024))
	rm -f "$tmp/seq"
	json_line peer=machine scenario="$scenario" bytes="$bytes" seconds="$secs" \
		mb_per_s="$(awk -v b="$bytes" -v s="$secs" 'BEGIN{printf "%.1f", b/s/1e6}')" \
		command="dd if=/dev/zero of=F bs=1M count=$mib conv=fdatasync"
}

seq_write seq-write-fdatasync "$SEQ_MB" "sequential write"
if ((LONG_MB > 0)); then
	seq_write seq-write-sustained "$LONG_MB" "sustained sequential write"
fi

log "machine: ${SYNC_WRITES} x 4 KiB writes with oflag=dsync"
out="$(LC_ALL=C dd if=/dev/zero of="$tmp/sync" bs=4k count="$SYNC_WRITES" oflag=dsync 2>&1)"
secs="$(dd_seconds "$out")"
rm -f "$tmp/sync"
json_line peer=machine scenario=write4k-dsync writes="$SYNC_WRITES" seconds="$secs" \
	ms_per_write="$(awk -v n="$SYNC_WRITES" -v s="$secs" 'BEGIN{printf "%.3f", s*1000/n}')" \
	command="dd if=/dev/zero of=F bs=4k count=$SYNC_WRITES oflag=dsync"

model="$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
[[ -n "$model" ]] || model="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n1)"
flags="$(sed -n 's/^flags\s*: //p' /proc/cpuinfo | head -n1)"
sha_ni=false
[[ " $flags " == *" sha_ni "* ]] && sha_ni=true
mem_kib="$(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
fs="$(df -PT "$RESULTS_DIR" | awk 'NR==2{print $2" "$1}')"
json_line peer=machine scenario=cpu cpu_model="$model" cores="$(nproc)" sha_ni="$sha_ni" \
	mem_gib="$(awk -v k="$mem_kib" 'BEGIN{printf "%.1f", k/1048576}')" \
	kernel="$(uname -r)" results_fs="$fs"
