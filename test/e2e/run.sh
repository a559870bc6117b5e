#!/usr/bin/env bash
# run.sh: run every end-to-end test in test/e2e (each *.sh but lib.sh and
# run.sh) in sequence against one build of ./cmd/stele, print each result,
# then "N passed, M failed" on a line of its own. Exits 1 if any failed.
#
#   test/e2e/run.sh            build ./cmd/stele once, run all tests
#   STELE_BIN=/path/stele test/e2e/run.sh
#   test/e2e/run.sh kcat       run only the tests named
#
# Each test gets 150 s (E2E_TEST_TIMEOUT overrides it for all), or what a
# line "# e2e-limit: SECONDS" in the test's script says.
set -uo pipefail

dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$dir/../.." && pwd)
per_test_limit=${E2E_TEST_TIMEOUT:-150} # seconds

tests=()
if (($# > 0)); then
	for name in "$@"; do
		tests+=("$dir/${name%.sh}.sh")
	done
else
	for t in "$dir"/*.sh; do
		case $(basename "$t") in lib.sh | run.sh) continue ;; esac
		tests+=("$t")
	done
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/stele-e2e-run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
if [[ -z ${STELE_BIN:-} ]]; then
	echo "building ./cmd/stele" >&2
	if ! (cd "$root" && timeout 600 go build -o "$tmp/stele" ./cmd/stele); then
		echo "go build ./cmd/stele failed: no test can run" >&2
		echo "0 passed, ${#tests[@]} failed"
		exit 1
	fi
	STELE_BIN=$tmp/stele
fi
export STELE_BIN

passed=0 failed=0 results=()
for t in "${tests[@]}"; do
	name=$(basename "$t" .sh)
	t0=$SECONDS
	if [[ ! -f $t ]]; then
		rc=127
		echo "no such test: $t" >&2
	else
		echo "=== $name" >&2
		# timeout puts the test in a process group of its own and, at the
		# deadline, signals the whole group: the test's EXIT trap cleans up and
		# what is left gets SIGKILL 10s later. An interrupt of run.sh is handed
		# on the same way.
		limit=$per_test_limit
		if [[ -z ${E2E_TEST_TIMEOUT:-} ]]; then
			own=$(sed -n 's/^# e2e-limit: *\([0-9][0-9]*\)$/\1/p' "$t" | head -n 1)
			[[ -n $own ]] && limit=$own
		fi
		timeout -k 10 "$limit" bash "$t" &
		child=$!
		trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; echo "interrupted" >&2; exit 130' INT TERM
		rc=0
		wait "$child" || rc=$?
		trap - INT TERM
	fi
	if ((rc == 0)); then
		passed=$((passed + 1))
		results+=("PASS $name ($((SECONDS - t0))s)")
	else
		failed=$((failed + 1))
		[[ $rc == 124 ]] && rc="$rc, timed out after ${limit}s"
		results+=("FAIL $name ($((SECONDS - t0))s, exit $rc)")
	fi
	echo "${results[-1]}"
done

echo "--- e2e summary ($((SECONDS - start))s)"
printf '%s\n' "${results[@]}"
echo "$passed passed, $failed failed"
((failed == 0))
